"""Tell open console pages that something durable changed.

The pages hear of the domain's events (llmgw.events), to which the console
subscribes at start-up; those arrive only once the change is committed.

With the in-memory channel layer (the embedded default) an event sent by
another process (the simulator, a worker) never arrives; the pages poll as
the fallback, so a lost event costs freshness, never correctness.
"""

from __future__ import annotations

import threading
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


def hold_changed(domain: str, held: bool) -> None:
    _send("facility changed", domain=domain)


class _Coalesced:
    """Placements come hundreds a second in a burst; the pages need to hear
    once that models and these nodes changed, not once a placement. The
    first event of a burst starts a short timer; when it fires, one message
    names the nodes the burst touched (None: more than a page would check),
    sent off the placing thread, which never waits on the channel layer.
    A message per node cost the placing process 2 ms of CPU a placement,
    and one a quarter second 0.4 ms; one a second costs what a placement
    without listeners costs, within the benchmark's noise. The pages poll
    every 10 to 15 s: a second is still news."""

    AFTER_S = 1.0
    MOST_NODES = 200

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: set[str] = set()
        self.timer: threading.Timer | None = None

    def add(self, nodes: list[str]) -> None:
        with self.lock:
            self.nodes.update(nodes)
            if self.timer is None:
                self.timer = threading.Timer(self.AFTER_S, self.flush)
                self.timer.daemon = True
                self.timer.start()

    def flush(self) -> None:
        with self.lock:
            nodes, self.nodes, self.timer = sorted(self.nodes), set(), None
        _send("models changed", nodes=nodes if len(nodes) <= self.MOST_NODES else None)


_placements = _Coalesced()


def replica_changed(model: str, replica: int, nodes: list[str]) -> None:
    _placements.add(nodes)


def counts_changed(model: str, always_running: int, under_load: int) -> None:
    # Models changed on no node: the held page reads it, node pages let it by.
    _send("models changed", nodes=[], model=model)


def subscribe() -> None:
    # Built now, at start-up: the first build imports the channel layer's
    # backend (50 ms of CPU), which otherwise fell on the first burst of
    # placements a process made.
    get_channel_layer()
    events.subscribe("node_changed", node_changed)
    events.subscribe("fabric_changed", fabric_changed)
    events.subscribe("hold_changed", hold_changed)
    events.subscribe("replica_placed", replica_changed)
    events.subscribe("replica_released", replica_changed)
    events.subscribe("counts_changed", counts_changed)
