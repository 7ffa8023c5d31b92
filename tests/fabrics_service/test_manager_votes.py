"""The fabric's subnet managers are voted on by every node observing them.
A report counts the votes again only where it can have moved one, so the
records must always be what counting everything again would give; and
nodes joining a fabric in agreement must not wait on each other."""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from llmgw.fabrics import managers, services
from llmgw.fabrics.models import ManagerObservation, PhysicalFabric, SubnetManager
from tests.payloads import managers_report

# Two fabrics' managers: a node moving from the first to the second stops
# observing the first, and counts no longer for or against its managers.
FIRST = ["0x0000000000a00001", "0x0000000000a00002", "0x0000000000a00003"]
SECOND = ["0x0000000000b00001", "0x0000000000b00002"]


def report(
    listed: list[dict[str, Any]], master: str, ports_only: bool = False, no_master: bool = False
) -> dict[str, Any]:
    if no_master:
        # A listing naming no master, and no port to say one: no claim.
        listed = [{**m, "state": "STANDBY"} for m in listed]
        return {"ports": [], "subnet_managers": [{"port": "mlx5_0/1", "managers": listed}]}
    out = managers_report(master, listed)
    if ports_only:
        out["subnet_managers"] = []
    return out


def agreed(guids: list[str]) -> dict[str, Any]:
    """What the fabric's nodes say when nothing is wrong: the first is master."""
    listed = [
        {"guid": g, "lid": i + 1, "priority": 10 - i, "state": "STANDBY" if i else "MASTER"}
        for i, g in enumerate(guids)
    ]
    return report(listed, guids[0])


def varied(rng: random.Random) -> dict[str, Any]:
    """Mostly what the others say, sometimes a node's own view of it."""
    guids = FIRST if rng.random() < 0.75 else SECOND
    if rng.random() < 0.5:
        return agreed(guids)
    shown = rng.sample(guids, rng.randint(1, len(guids)))
    listed = [
        {
            "guid": g,
            "lid": rng.choice([1, 2]),
            "priority": rng.choice([5, 10]),
            "state": rng.choice(["MASTER", "STANDBY", "NOTACTIVE"]),
        }
        for g in shown
    ]
    way = rng.random()
    return report(listed, rng.choice(shown), ports_only=way < 0.2, no_master=way > 0.85)


def stored() -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    return (
        set(SubnetManager.objects.values_list("guid", "fabric_id", "state", "lid", "priority")),
        set(PhysicalFabric.objects.values_list("identity", "master_guid", "master_priority")),
    )


def counted_whole(now: Any, derive: Any) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """The records as counting every observation again makes them, rolled back."""
    guids = set(ManagerObservation.objects.values_list("guid", flat=True))
    fabrics = set(PhysicalFabric.objects.values_list("pk", flat=True))
    sid = transaction.savepoint()
    try:
        everything = managers.records_of(guids, fabrics)
        derive(sorted(guids | set(everything)), everything)
        for fabric in PhysicalFabric.objects.all():
            managers.derive_master(fabric, "recount", now)
        return stored()
    finally:
        transaction.savepoint_rollback(sid)


# Few nodes make close votes; many make many first reports, as in a join.
@pytest.mark.django_db
@pytest.mark.parametrize("fleet,agreeing", [(4, 0), (60, 10)])
def test_the_records_are_always_the_whole_count(make_node, monkeypatch, fleet, agreeing):
    nodes = [make_node(f"ib-{i}")[0] for i in range(fleet)]
    counts: list[int] = []
    derive = managers.derive_managers

    def counting(guids: list[str], records: Any) -> None:
        counts.append(len(guids))
        derive(guids, records)

    monkeypatch.setattr(managers, "derive_managers", counting)
    rng, now = random.Random(7), timezone.now()
    for step in range(200):
        now += timedelta(seconds=1)
        node = rng.choice(nodes)
        with transaction.atomic():
            services.observe(node, varied(rng), now)
        assert stored() == counted_whole(now, derive), f"step {step}: {node.name}"
    # Both ways were taken: reports that agreed counted nothing again.
    assert counts.count(0) >= agreeing, counts
    assert sum(1 for n in counts if n) > 100, counts


@pytest.mark.django_db(transaction=True)
def test_nodes_joining_in_agreement_do_not_wait_on_each_other(make_node):
    first, joining, other = (make_node(name)[0] for name in ("ib-0", "ib-1", "ib-2"))
    services.observe(first, agreed(FIRST), timezone.now())
    held, done = threading.Event(), threading.Event()

    def join_and_hold() -> None:
        try:
            with transaction.atomic():
                services.observe(joining, agreed(FIRST), timezone.now())
                held.set()
                done.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=join_and_hold)
    thread.start()
    try:
        assert held.wait(30)
        later = timezone.now()
        with transaction.atomic():
            with connection.cursor() as cursor:
                # Waiting on the other's rows until it commits would fail here.
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            services.observe(other, agreed(FIRST), later)
    finally:
        done.set()
        thread.join()
    seen = dict(SubnetManager.objects.values_list("guid", "state"))
    assert seen == {FIRST[0]: "MASTER", FIRST[1]: "STANDBY", FIRST[2]: "STANDBY"}
    assert ManagerObservation.objects.filter(node=other).count() == 3
    assert PhysicalFabric.objects.get().master_guid == FIRST[0]
    # With no one holding the rows, an agreeing report's time is theirs.
    last = make_node("ib-3")[0]
    latest = timezone.now()
    services.observe(last, agreed(FIRST), latest)
    assert {m.last_seen for m in SubnetManager.objects.all()} == {latest}
    assert PhysicalFabric.objects.get().last_seen == latest
