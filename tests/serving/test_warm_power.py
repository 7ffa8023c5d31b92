"""Two processes placing in one power-capped domain cannot take it past its
cap between them: the database's check (serving.checked) locks the
domain's cap and sums its draw from the stored shards and the latest
readings, as placement.power judges it.

Each process keeps its own warm fleet, and a log row for a node says only
that node changed: a shard placed on the rack's other node leaves the
decision's own node unchanged, and without the sum under lock the second
process committed a shard that took the rack to 2.0 kW of its 1.5 kW cap.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from llmgw.catalog import services as catalog
from llmgw.facility import services as facility
from llmgw.inventory import services as inventory
from llmgw.inventory.models import Node
from llmgw.placement.scheduler import Inventory
from llmgw.placement.snapshot import node_views
from llmgw.serving import checked, placing, warm
from llmgw.serving.models import Shard
from tests import bulk_fleet
from tests.threads import in_own_thread

pytestmark = pytest.mark.django_db(transaction=True)

# node-00000 and node-00001 share rack r000; each model is pinned to one.
CATALOG = """
models:
  - name: left
    source: hf://x/left
    profiles:
      - name: one
        gpu_class: H100-80GB
        gpus_per_shard: 1
        power_w: 1000
        node_selector:
          side: left
  - name: right
    source: hf://x/right
    profiles:
      - name: one
        gpu_class: H100-80GB
        gpus_per_shard: 1
        power_w: 1000
        node_selector:
          side: right
"""


@pytest.fixture
def rack() -> None:
    bulk_fleet.build(2)
    Node.objects.filter(name="node-00000").update(operator_labels={"side": "left"})
    Node.objects.filter(name="node-00001").update(operator_labels={"side": "right"})
    catalog.apply_text(CATALOG)
    facility.set_budgets([{"domain": "rack=r000", "watts": 1500.0}])


def other_process_places(model: str) -> Any:
    """A placement by another process: its own connection and warm fleet,
    and, as a process that slipped past the advisory lock would, not
    waiting for ours (which this process holds while it decides)."""
    ours, key = warm.FLEET, placing._LOCK_KEY
    warm.FLEET, placing._LOCK_KEY = warm.WarmFleet(), key + 1
    try:
        return in_own_thread(placing.place_replica, model)
    finally:
        warm.FLEET, placing._LOCK_KEY = ours, key


def test_two_processes_cannot_take_a_capped_rack_past_its_cap(
    rack: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both processes are warm: each would place its shard (1.0 of 1.5 kW).
    assert placing.dry_run("right").decision is not None
    # Ours looks, and before it decides the other commits its shard on
    # the rack's other node: our look did not see it.
    real = warm.WarmFleet._changes
    placed: list[Any] = []

    def raced(self: warm.WarmFleet, *args: Any) -> Any:
        out = real(self, *args)
        if not placed:
            placed.append(other_process_places("left")[0])
        return out

    monkeypatch.setattr(warm.WarmFleet, "_changes", raced)
    replica, _ = placing.place_replica("right")
    assert placed[0] is not None
    assert replica is None, "two shards of 1.0 kW committed under a 1.5 kW cap"
    assert "rack r000, which is at 1.0 kW of its 1.5 kW cap" in placing.explain("right")["text"]
    assert Shard.objects.count() == 1
    assert connection.in_atomic_block is False


def test_the_check_sums_a_domain_as_the_facility_listing_does(rack: None) -> None:
    # Every figure the sum reads: cards' limits and draw, CPU packages,
    # a profile's declared watts; a node with none of them is unknown.
    bulk_fleet.build(1, start=2)
    Node.objects.filter(name="node-00000").update(
        gpu_telemetry=[
            {"index": 0, "power_limit_w": 700, "power_draw_w": 310.5},
            {"index": 1, "power_limit_w": 700.0, "power_draw_w": True},
            "not a card",
        ],
        sensors={"cpu_packages": [{"power_w": 180}, {"power_w": "n/a"}]},
    )
    Node.objects.filter(name="node-00001").update(sensors={"cpu_packages": [{"power_w": 95.25}]})
    facility.set_budgets(
        [{"domain": "rack=r000", "watts": 9000.0}, {"domain": "pdu=none", "watts": 1.0}]
    )
    assert placing.place_replica("right")[0] is not None  # 1,000 W declared on node-00001
    listed = {r["domain"]: r for r in facility.overview()["domains"]}["rack=r000"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
        (xmax,) = cursor.fetchone()
        members = list(Node.objects.values_list("pk", flat=True))
        params = {"added": [], "watts": [], "undeclared": [], "xip": [], "xmax": xmax}
        params["members"] = members
        cursor.execute(checked.POWER, {**params, "domains": ["rack=r000", "pdu=none"]})
        rows = cursor.fetchall()
    assert len(rows) == 1  # a cap no node is in sums nothing
    domain, cap, draw, unknown, members, changed = rows[0]
    assert (domain, cap, changed) == ("rack=r000", 9000.0, False)
    assert round(draw, 1) == listed["draw_w"] == 1400.0 + 1000.0
    assert unknown == listed["unknown_nodes"] == 1
    assert len(members) == len(listed["nodes"]) == 3


def test_a_node_moved_into_the_domain_since_the_look_is_counted(rack: None) -> None:
    # The sum reads the nodes the look had in the domain and every node
    # changed since, as their rows say now: a node labelled into the rack
    # after the look is counted, though the look did not have it there.
    bulk_fleet.build(1, start=20)  # rack r001
    Node.objects.filter(name="node-00020").update(
        gpu_telemetry=[{"index": 0, "power_limit_w": 700}, {"index": 1, "power_limit_w": 700}]
    )
    looked = list(
        Node.objects.filter(name__in=["node-00000", "node-00001"]).values_list("pk", flat=True)
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
        (xmax,) = cursor.fetchone()
    inventory.set_labels("node-00020", {"llmgw.io/rack": "r000"}, "ops")
    moved = Node.objects.get(name="node-00020").pk
    params = {"added": [], "watts": [], "undeclared": [], "xip": [], "xmax": xmax}
    params["members"] = looked
    with connection.cursor() as cursor:
        cursor.execute(checked.POWER, {**params, "domains": ["rack=r000"]})
        ((_, _, draw, _, members, _),) = cursor.fetchall()
    assert moved in members and draw == 1400.0
    # And one labelled out of it is not.
    inventory.set_labels("node-00020", {"llmgw.io/rack": "r001"}, "ops")
    with connection.cursor() as cursor:
        cursor.execute(checked.POWER, {**params, "domains": ["rack=r000"]})
        ((_, _, draw, _, members, _),) = cursor.fetchall()
    assert moved not in members and draw == 0.0


def counted(inventory: Inventory) -> list[tuple[object, ...]]:
    return sorted(
        (d.key, d.cap, d.declared, d.derived, d.measured, d.draw, d.unknown)
        for d in inventory.power_domains()
    )


def test_the_power_timer_reads_the_readings_alone(rack: None) -> None:
    # Readings are not logged (a heartbeat moves them every time): the warm
    # fleet reads a capped node's again on a timer, those figures alone, and
    # its index is then the database's.
    assert placing.dry_run("right").decision is not None  # warm; the rack's draw unknown
    Node.objects.filter(name="node-00000").update(
        gpu_telemetry=[{"index": 0, "power_limit_w": 700, "power_draw_w": 600.5}],
        sensors={"cpu_packages": [{"power_w": 200}]},
    )
    fleet = warm.FLEET
    reads, replaced = fleet.reads, fleet.replaced
    assert placing.dry_run("right").decision is not None  # not yet due
    fleet.power_read_at -= warm.POWER_EVERY_S + 1
    # 800.5 W measured beside it, and the shard's 1,000 W: past the 1.5 kW cap.
    assert placing.dry_run("right").decision is None
    # No view read again whole, nor replaced in the index.
    assert (fleet.reads, fleet.replaced) == (reads, replaced)
    with fleet.lock:
        inventory = fleet.current()
        fresh = node_views()
        assert {v.name: v for v in fleet.views.values()} == {v.name: v for v in fresh}
        assert counted(inventory) == counted(Inventory(fresh))
