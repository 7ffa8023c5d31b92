"""Tell open console pages that something durable changed.

The pages hear of the domain's events (llmgw.events), to which the console
subscribes at start-up; those arrive only once the change is committed.

With the in-memory channel layer (the embedded default) an event sent by
another process (the simulator, a worker) never arrives; the pages poll as
the fallback, so a lost event costs freshness, never correctness.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from llmgw import events

GROUP = "console"


def _send(kind: str, **data: Any) -> None:
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(GROUP, {"type": "console.event", "kind": kind, **data})


def node_changed(node: str, changes: dict[str, Any]) -> None:
    """The node's page; its GPUs also redraw the racks."""
    _send("node changed", node=node)
    if {"gpu_state_digest", "gpu_health_digest"} & changes.keys():
        _send("nvlink changed", node=node)


def fabric_changed(node: str | None = None, fabric: int | None = None) -> None:
    _send("fabric changed", node=node, fabric=fabric)


def subscribe() -> None:
    events.subscribe("node_changed", node_changed)
    events.subscribe("fabric_changed", fabric_changed)
