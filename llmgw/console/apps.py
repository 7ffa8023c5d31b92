from django.apps import AppConfig


class ConsoleConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.console"
    label = "console"

    def ready(self) -> None:
        # The Celery app, made in every Django process before a task is
        # sent (`import llmgw` no longer makes it; see llmgw/__init__.py).
        import llmgw.celery  # noqa: F401
        from llmgw.console import events

        events.subscribe()
