"""Tell open console pages that something durable changed.

Services call these inside their transaction; the event leaves only once
the transaction commits (a page that refetches on an event must find the
new rows, and a rolled-back change must send nothing). They are called on
the durable-change path only, never per plain heartbeat: that path is the
hot one, and a heartbeat that changes nothing durable changes nothing a page
draws that its ~10 s poll would not catch anyway.

With the in-memory channel layer (the embedded default) an event sent by
another process (the simulator, a worker) never arrives; the pages poll as
the fallback, so a lost event costs freshness, never correctness.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction

log = logging.getLogger(__name__)
GROUP = "console"


def _send_now(kind: str, data: dict[str, Any]) -> None:
    try:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is None:
            return
        async_to_sync(layer.group_send)(GROUP, {"type": "console.event", "kind": kind, **data})
    except Exception:  # noqa: BLE001 - a page event must never fail a heartbeat's commit
        log.warning("console event %s not sent", kind, exc_info=True)


def send(kind: str, **data: Any) -> None:
    transaction.on_commit(lambda: _send_now(kind, data))


def node_changed(name: str, changes: dict[str, Any]) -> None:
    """After _store_changes: the node's page; its GPUs also redraw the racks."""
    if not changes:
        return
    send("node changed", node=name)
    if {"gpu_state_digest", "gpu_health_digest"} & changes.keys():
        send("nvlink changed", node=name)


def fabric_changed(node: str | None = None, fabric: int | None = None) -> None:
    """A node's ports or subnet managers, or a fabric's stored map."""
    send("fabric changed", node=node, fabric=fabric)
