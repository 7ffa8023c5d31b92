from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "llmgw.inventory"
    label = "inventory"
    verbose_name = "Inventory"

    def ready(self) -> None:
        from llmgw.inventory import heartbeats, sections

        for section in heartbeats.SECTIONS:
            sections.register(section)
