from django.apps import AppConfig


class FabricsConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.fabrics"
    label = "fabrics"
    verbose_name = "Fabrics"

    def ready(self) -> None:
        from llmgw.fabrics import services, sweep
        from llmgw.inventory import commands, sections

        commands.on_finish(sweep.KIND, sweep.store_result)
        sections.register(services.SECTION)
