"""Cordons, labels, holds, placements and releases are told through
llmgw.events once committed (never when rolled back), and the console
hears a burst of placements as one message."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import transaction

from llmgw import events
from llmgw.console import events as console_events
from llmgw.facility import services as facility
from llmgw.inventory import services as inventory
from llmgw.serving import placing
from tests.serving.test_warm_fleet import dgx  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ("node_changed", "hold_changed", "replica_placed", "replica_released")


@pytest.fixture
def heard() -> Any:
    got: list[tuple[str, dict[str, Any]]] = []

    def hearer(kind: str) -> Any:
        return lambda **data: got.append((kind, data))

    hears = {kind: hearer(kind) for kind in KINDS}
    for kind, hear in hears.items():
        events.subscribe(kind, hear)
    yield got
    for kind, hear in hears.items():
        events._handlers[kind].remove(hear)


def test_cordons_labels_and_holds_are_told_on_commit(dgx: Any, heard: Any) -> None:  # noqa: F811
    inventory.cordon("dgx-1", "RMA", "ops")
    inventory.uncordon("dgx-1", "ops")
    inventory.set_labels("dgx-1", {"llmgw.io/rack": "r01"}, "ops")
    facility.hold("rack=r01", "PDU work", False, "ops")
    facility.release("rack=r01")
    assert [(k, d.get("node") or d.get("domain")) for k, d in heard] == [
        ("node_changed", "dgx-1"),
        ("node_changed", "dgx-1"),
        ("node_changed", "dgx-1"),
        ("hold_changed", "rack=r01"),
        ("hold_changed", "rack=r01"),
    ]
    assert heard[0][1]["changes"] == {"cordoned": True}
    assert heard[2][1]["changes"]["operator_labels"]["llmgw.io/rack"] == "r01"
    assert heard[4][1]["held"] is False


def test_a_rolled_back_cordon_or_placement_tells_nobody(dgx: Any, heard: Any) -> None:  # noqa: F811
    with pytest.raises(RuntimeError), transaction.atomic():
        inventory.cordon("dgx-1", "RMA", "ops")
        assert placing.place_replica("one")[0] is None  # cordoned: refused
        raise RuntimeError("undo")
    with pytest.raises(RuntimeError), transaction.atomic():
        assert placing.place_replica("one")[0] is not None
        raise RuntimeError("undo")
    assert heard == []


def test_placements_and_releases_are_told_with_their_nodes(dgx: Any, heard: Any) -> None:  # noqa: F811
    replica, _ = placing.place_replica("one")
    assert replica is not None
    placing.release_replica(replica.pk)
    assert heard == [
        ("replica_placed", {"model": "one", "replica": replica.pk, "nodes": ["dgx-1"]}),
        ("replica_released", {"model": "one", "replica": replica.pk, "nodes": ["dgx-1"]}),
    ]


def test_the_console_hears_a_burst_of_placements_once(dgx: Any, monkeypatch: Any) -> None:  # noqa: F811
    # An earlier test's burst, still on its timer, would be heard in this one.
    pending = console_events._placements.timer
    if pending is not None:
        pending.join()
    sent: list[tuple[str, dict[str, Any]]] = []
    senders: set[threading.Thread] = set()

    def send(kind: str, **data: Any) -> None:
        sent.append((kind, data))
        senders.add(threading.current_thread())

    monkeypatch.setattr(console_events, "_send", send)
    started = time.monotonic()
    placed = [placing.place_replica("one")[0] for _ in range(4)]
    took = time.monotonic() - started
    assert all(r is not None for r in placed)
    if took < console_events._Coalesced.AFTER_S:  # a loaded machine may take longer
        assert sent == []  # not per placement
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(console_events._Coalesced.AFTER_S * 2)
    assert sent and all(m == ("models changed", {"nodes": ["dgx-1"]}) for m in sent), sent
    assert threading.current_thread() not in senders  # the placing thread never waits on it
    if took < console_events._Coalesced.AFTER_S:
        assert len(sent) == 1


def test_a_drain_progress_said_again_unchanged_tells_nobody(dgx: Any, heard: Any) -> None:  # noqa: F811
    inventory.set_labels("dgx-1", {"llmgw.io/rack": "r01"}, "ops")
    held = facility.hold("rack=r01", "PDU work", True, "ops")
    heard.clear()
    for _ in range(3):  # as the reconciler says it every tick
        facility.record_progress(held, "drained: nothing runs in rack r01", None)
    facility.record_progress(held, "moving one replica", {"old": 1})
    assert [k for k, _ in heard] == ["hold_changed", "hold_changed"]


def test_held_counts_are_told_to_the_held_page(dgx: Any, monkeypatch: Any) -> None:  # noqa: F811
    from llmgw.serving import services

    heard: list[dict[str, Any]] = []

    def hear(**data: Any) -> None:
        heard.append(data)

    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(console_events, "_send", lambda kind, **data: sent.append((kind, data)))
    events.subscribe("counts_changed", hear)
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            services.set_counts("one", 0, 2)
            raise RuntimeError("undo")
        assert heard == [] and sent == []
        services.set_counts("one", 0, 2)
    finally:
        events._handlers["counts_changed"].remove(hear)
    assert heard == [{"model": "one", "always_running": 0, "under_load": 2}]
    # Models changed on no node: node pages let it by.
    assert sent == [("models changed", {"nodes": [], "model": "one"})]
