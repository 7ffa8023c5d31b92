"""What changed, told to whoever listens, once the change is committed.

A domain app publishes (`events.publish("node_changed", node=..., changes=...)`)
and never learns who listens; a reader subscribes at start-up, in its
AppConfig.ready() (the console sends its pages a message). So no domain app
imports a reader, and a new reader touches no domain app.

Delivery waits for the publishing transaction to commit: a reader that
refetches on an event must find the new rows, and a rolled-back change must
tell nobody. Publish on the durable-change path only, never per plain
heartbeat: that path is the hot one.

The events, and what each carries:
- node_changed: node (its name), changes (the Node columns a heartbeat's
  durable transaction, a cordon or a label updated, with their new values;
  never empty).
- fabric_changed: node (a name) or fabric (a PhysicalFabric id), the other
  None: a node's ports or subnet managers, or a fabric's stored map.
- hold_changed: domain (its key, "rack=r01"), held (False once released):
  held, released, or its drain's progress moved.
- replica_placed, replica_released: model (its name), replica (its id),
  nodes (the names its shards are on).
- counts_changed: model (its name), always_running, under_load: a model's
  held counts set.
- nodes_not_ready: nodes (their names): the staleness pass marked them
  NotReady (silent through their grace).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import transaction

log = logging.getLogger(__name__)

KINDS = frozenset(
    {
        "node_changed",
        "fabric_changed",
        "hold_changed",
        "replica_placed",
        "replica_released",
        "counts_changed",
        "nodes_not_ready",
    }
)

Handler = Callable[..., None]
_handlers: dict[str, list[Handler]] = {kind: [] for kind in KINDS}


def _known(kind: str) -> list[Handler]:
    # A misspelt kind would otherwise publish to nobody, silently.
    if kind not in KINDS:
        raise ValueError(f"unknown event {kind!r}; the events are {sorted(KINDS)}")
    return _handlers[kind]


def subscribe(kind: str, handler: Handler) -> None:
    """Call `handler(**data)` after each commit that published `kind`."""
    handlers = _known(kind)
    if handler not in handlers:  # ready() run twice must not send twice
        handlers.append(handler)


def publish(kind: str, **data: Any) -> None:
    """Tell the subscribers of `kind` once the current transaction commits
    (at once outside one)."""
    if _known(kind):
        transaction.on_commit(partial(_deliver, kind, data))


def _deliver(kind: str, data: dict[str, Any]) -> None:
    for handler in list(_handlers[kind]):
        try:
            handler(**data)
        except Exception:  # noqa: BLE001 - a reader must never fail the commit's caller
            log.warning("event %s: %r failed", kind, handler, exc_info=True)
