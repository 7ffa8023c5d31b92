from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "llmgw.serving"
    label = "serving"
    verbose_name = "Serving"
