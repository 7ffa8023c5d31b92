"""Subnet managers: each node's observations, and the fabric's view of them.

A node writes only its own ManagerObservation rows. The SubnetManager rows
(and a fabric's master) are then worked out again from every node that
observes the fabric: what most of them say wins, and a tie leaves the record
as it was. So one node, lying or confused, can neither rewrite what the
others observe nor, on its word alone, demote a master, hide a standby or
stage a failover; a real failover is recorded once most of the fabric's
nodes report it. A node that observes the fabric but no longer lists a
manager counts as saying it is GONE.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db.models import Count, Max

from llmgw.fabrics.models import ManagerObservation, MasterChange, PhysicalFabric, SubnetManager
from llmgw.inventory.models import Node

GONE = "GONE"
K = TypeVar("K", bound=Hashable)


@dataclass
class Seen:
    """One manager in one node's report."""

    fabric: PhysicalFabric
    lid: int | None
    priority: int | None
    state: str
    master: bool = False


def vote(counts: Counter[K], current: K | None, fallback: K | None = None) -> K:
    """What most say; on a tie, what the record says if it is among the
    tied, else `fallback` if it is, else the least (so the same every time)."""
    top = max(counts.values())
    tied = sorted((k for k, n in counts.items() if n == top), key=repr)
    if len(tied) == 1:
        return tied[0]
    for preferred in (current, fallback):
        if preferred is not None and preferred in tied:
            return preferred
    return tied[0]


def record(
    node: Node, seen: dict[str, Seen], claims: dict[int, str], listed: bool, now: datetime
) -> None:
    """Store this node's observations and work the fabric's view out again.

    `seen`: GUID -> what this report says of it. `claims`: fabric pk -> the
    GUID this node calls its master. `listed`: the report carried a listing,
    which then replaces the node's observations whole; without one (ports
    only) managers are added and the master flags moved, nothing removed."""
    mine = {o.guid: o for o in ManagerObservation.objects.filter(node=node).order_by()}
    touched = set(mine) | set(seen)
    fabrics = {o.fabric_id for o in mine.values()} | {s.fabric.pk for s in seen.values()}
    if listed and mine:
        ManagerObservation.objects.filter(node=node).exclude(guid__in=list(seen)).delete()
    # One statement for all of them: a node joining lists a manager or
    # two per fabric, and thousands join at once. A node that had no
    # observations (every node joining) has only these rows, so their
    # master flags are set here rather than moved by two updates a fabric.
    ManagerObservation.objects.bulk_create(
        [
            ManagerObservation(
                node=node,
                guid=guid,
                fabric=s.fabric,
                lid=s.lid,
                priority=s.priority,
                state=s.state,
                master=not mine and claims.get(s.fabric.pk) == guid,
                seen_at=now,
            )
            for guid, s in seen.items()
            # Without a listing, its word on a known manager stands until the next one.
            if listed or guid not in mine
        ],
        update_conflicts=True,
        unique_fields=["node", "guid"],
        update_fields=["fabric", "lid", "priority", "state", "master", "seen_at"],
    )
    for fabric_id, guid in claims.items() if mine else ():
        observed = ManagerObservation.objects.filter(node=node, fabric_id=fabric_id)
        observed.exclude(guid=guid).update(master=False)
        observed.filter(guid=guid).update(master=True)
    derive_managers(sorted(touched))
    for fabric in PhysicalFabric.objects.filter(pk__in=fabrics):
        derive_master(fabric, node.name, now)


def derive_managers(guids: list[str]) -> None:
    """The fabric's record of each manager, from every node's observation of
    it. Counted by the database: each of a fabric's thousands of nodes
    observes its managers, and a node joining must not read them all. A
    statement per step for all of `guids`, not five per GUID: a node joining
    names two managers a fabric, and thousands join at once."""
    if not guids:
        return
    rows = {m.guid: m for m in SubnetManager.objects.filter(guid__in=guids).order_by()}
    # Per GUID, fabric and state: how many nodes say so, and when last.
    counted: dict[str, list[dict[str, Any]]] = {guid: [] for guid in guids}
    for c in (
        ManagerObservation.objects.filter(guid__in=guids)
        .order_by()
        .values("guid", "fabric_id", "state")
        .annotate(n=Count("id"), last=Max("seen_at"))
    ):
        counted[c["guid"]].append(c)
    voters: dict[int, int] = {}
    managers = []
    for guid in guids:
        row, by_state = rows.get(guid), counted[guid]
        if not by_state:
            # Kept, not deleted: the GUID carries the fabric's name through a
            # failover. Marked: it is no standby anyone can fail over to.
            if row is not None and row.state != GONE:
                row.state = GONE
                row.save(update_fields=["state"])
            continue
        by_fabric: Counter[int] = Counter()
        for c in by_state:
            by_fabric[c["fabric_id"]] += c["n"]
        fabric_id = vote(by_fabric, row.fabric_id if row is not None else None)
        # One observation per node and GUID (a constraint): a state per node.
        states = Counter({c["state"]: c["n"] for c in by_state if c["fabric_id"] == fabric_id})
        if fabric_id not in voters:
            voters[fabric_id] = _voters(fabric_id)
        # A node observing the fabric but not this manager says it is GONE.
        if voters[fabric_id] > states.total():
            states[GONE] += voters[fabric_id] - states.total()
        state = vote(states, row.state if row is not None else None, fallback=GONE)
        if state == GONE:
            if row is not None and (row.state, row.fabric_id) != (GONE, fabric_id):
                row.state, row.fabric_id = GONE, fabric_id
                row.save(update_fields=["state", "fabric"])
            continue  # never made up from one node's word: no row for it
        latest = (
            ManagerObservation.objects.filter(guid=guid, fabric_id=fabric_id, state=state)
            .order_by("-seen_at")
            .values_list("lid", "priority")
            .first()
        )
        assert latest is not None
        last_seen = max(c["last"] for c in by_state)
        managers.append(
            SubnetManager(
                guid=guid,
                fabric_id=fabric_id,
                lid=latest[0],
                priority=latest[1],
                state=state,
                last_seen=last_seen,
            )
        )
    # What update_or_create did for each, in one statement.
    SubnetManager.objects.bulk_create(
        managers,
        update_conflicts=True,
        unique_fields=["guid"],
        update_fields=["fabric", "lid", "priority", "state", "last_seen"],
    )


def _voters(fabric_id: int) -> int:
    count: int = (
        ManagerObservation.objects.filter(fabric_id=fabric_id)
        .order_by()
        .values("node_id")
        .distinct()
        .count()
    )
    return count


def derive_master(fabric: PhysicalFabric, reported_by: str, now: datetime) -> None:
    said = ManagerObservation.objects.filter(fabric=fabric, master=True).order_by()
    claims = Counter({c["guid"]: c["n"] for c in said.values("guid").annotate(n=Count("id"))})
    if not claims:
        return
    guid = vote(claims, fabric.master_guid or None)
    if guid == fabric.master_guid:
        return
    if fabric.master_guid:
        MasterChange.objects.create(
            fabric=fabric,
            at=now,
            previous_guid=fabric.master_guid,
            master_guid=guid,
            reported_by=reported_by,
        )
    fabric.master_guid, fabric.master_priority = guid, _priority(guid, fabric)
    fabric.save(update_fields=["master_guid", "master_priority"])


def _priority(guid: str, fabric: PhysicalFabric) -> int | None:
    said = ManagerObservation.objects.filter(fabric=fabric, guid=guid, master=True)
    known = Counter(p for p in said.values_list("priority", flat=True) if p is not None)
    return vote(known, None) if known else None
