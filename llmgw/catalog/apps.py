from django.apps import AppConfig


class CatalogConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.catalog"
    label = "catalog"
    verbose_name = "Catalog"
