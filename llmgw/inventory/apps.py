from django.apps import AppConfig


class InventoryConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.inventory"
    label = "inventory"
    verbose_name = "Inventory"

    def ready(self) -> None:
        from llmgw.inventory import heartbeats, sections

        for section in heartbeats.SECTIONS:
            sections.register(section)
