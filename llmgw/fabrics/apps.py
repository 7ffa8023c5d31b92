from django.apps import AppConfig


class FabricsConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.fabrics"
    label = "fabrics"
    verbose_name = "Fabrics"

    def ready(self) -> None:
        from llmgw.fabrics import services, sweep, tasks
        from llmgw.inventory import commands, sections

        commands.on_finish(sweep.KIND, tasks.map_in_a_worker)
        sections.register(services.SECTION)
