from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "llmgw.inventory"
    label = "inventory"
    verbose_name = "Inventory"
