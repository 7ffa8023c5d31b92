"""llmgw: the control plane."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    # Celery's app is made on first use, not on `import llmgw`: `llmgw ctl`
    # on an operator's laptop imports this package too, and building the
    # app (Celery, kombu) was most of a one-second command. Every Django
    # process makes it in ConsoleConfig.ready, before any task is sent.
    if name == "celery_app":
        from llmgw.celery import app

        return app
    raise AttributeError(f"module 'llmgw' has no attribute {name!r}")
