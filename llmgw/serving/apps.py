from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    from llmgw.inventory.models import Node


def _rebuild_desired(node: Node) -> None:
    """A node that joins after the catalog named its engines hears of them
    at its registration; otherwise it would wait for a placement that
    refuses it for having none."""
    # Not at the top: apps.py is imported before the models are ready.
    from llmgw.serving import desired

    desired.rebuild([node.pk])


def _replace_soon(nodes: list[str]) -> None:
    """Nodes gone NotReady: their replicas are lost, and the reconciler
    places them again now rather than at its next tick (up to 10 s of a
    rack's recovery)."""
    from llmgw.serving import tasks

    tasks.reconcile_soon()


class ServingConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.serving"
    label = "serving"
    verbose_name = "Serving"

    def ready(self) -> None:
        from llmgw import events, holdings
        from llmgw.inventory import sections
        from llmgw.serving import reports
        from llmgw.serving.holdings import Holdings

        sections.register(reports.SECTION)
        holdings.register(Holdings())
        sections.on_registration(_rebuild_desired)
        events.subscribe("nodes_not_ready", _replace_soon)
