from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "llmgw.console"
    label = "console"

    def ready(self) -> None:
        from llmgw.console import events

        events.subscribe()
