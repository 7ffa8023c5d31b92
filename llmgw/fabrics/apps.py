from django.apps import AppConfig


class FabricsConfig(AppConfig):
    name = "llmgw.fabrics"
    label = "fabrics"
    verbose_name = "Fabrics"
