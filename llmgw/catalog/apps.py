from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "llmgw.catalog"
    label = "catalog"
    verbose_name = "Catalog"
