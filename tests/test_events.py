"""llmgw.events: delivered once the publishing transaction commits, to
every subscriber, one failing subscriber costing the others nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from llmgw import events
from llmgw.console import events as console_events
from llmgw.inventory import heartbeats
from tests.payloads import heartbeat


@pytest.fixture
def heard() -> Any:
    got: list[tuple[str, Any]] = []

    def fail(**data: Any) -> None:
        raise RuntimeError("a reader that breaks")

    def hear(**data: Any) -> None:
        got.append(("fabric_changed", data))

    events.subscribe("fabric_changed", fail)
    events.subscribe("fabric_changed", hear)
    yield got
    events._handlers["fabric_changed"].remove(fail)
    events._handlers["fabric_changed"].remove(hear)


@pytest.mark.django_db(transaction=True)
def test_an_event_is_delivered_on_commit_and_never_on_rollback(heard: Any) -> None:
    with transaction.atomic():
        events.publish("fabric_changed", node="n1", fabric=None)
        assert heard == []
    assert heard == [("fabric_changed", {"node": "n1", "fabric": None})]
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        events.publish("fabric_changed", node="n2", fabric=None)
        1 / 0  # noqa: B018
    assert len(heard) == 1


def test_an_unknown_event_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event 'node_chnaged'"):
        events.publish("node_chnaged", node="n1")
    with pytest.raises(ValueError, match="unknown event"):
        events.subscribe("nodes_changed", print)


def test_the_console_hears_what_a_heartbeat_changed_once_it_is_stored(
    make_node: Any, monkeypatch: Any, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(console_events, "_send", lambda kind, **data: sent.append((kind, data)))
    node, _ = make_node("gpu-1")
    ports = [{"device": "mlx5_0", "port": 1, "state": "DOWN", "phys_state": "Disabled"}]
    payload = heartbeat("gpu-1", gpus=[{"index": 0}], ports=ports)
    with django_capture_on_commit_callbacks(execute=True):
        heartbeats.heartbeat(node, payload)
        assert sent == []
    assert sent == [
        ("fabric changed", {"node": "gpu-1", "fabric": None}),
        ("node changed", {"node": "gpu-1"}),
        ("nvlink changed", {"node": "gpu-1"}),
    ]
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        heartbeats.heartbeat(node, payload)
    assert sent == [], "nothing durable changed"
