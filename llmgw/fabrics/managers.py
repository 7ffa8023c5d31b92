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
from typing import TypeVar

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
    mine = {o.guid: o for o in ManagerObservation.objects.filter(node=node)}
    touched = set(mine) | set(seen)
    fabrics = {o.fabric_id for o in mine.values()} | {s.fabric.pk for s in seen.values()}
    if listed:
        ManagerObservation.objects.filter(node=node).exclude(guid__in=list(seen)).delete()
    for guid, s in seen.items():
        if not listed and guid in mine:
            continue  # the listing's word on it stands until the next listing
        ManagerObservation.objects.update_or_create(
            node=node,
            guid=guid,
            defaults={
                "fabric": s.fabric,
                "lid": s.lid,
                "priority": s.priority,
                "state": s.state,
                "master": False,
                "seen_at": now,
            },
        )
    for fabric_id, guid in claims.items():
        observed = ManagerObservation.objects.filter(node=node, fabric_id=fabric_id)
        observed.exclude(guid=guid).update(master=False)
        observed.filter(guid=guid).update(master=True)
    for guid in sorted(touched):
        derive_manager(guid)
    for fabric in PhysicalFabric.objects.filter(pk__in=fabrics):
        derive_master(fabric, node.name, now)


def derive_manager(guid: str) -> None:
    row = SubnetManager.objects.filter(guid=guid).first()
    observations = list(ManagerObservation.objects.filter(guid=guid).order_by("-seen_at"))
    if not observations:
        # Kept, not deleted: the GUID carries the fabric's name through a
        # failover. Marked: it is no standby anyone can fail over to.
        if row is not None and row.state != GONE:
            row.state = GONE
            row.save(update_fields=["state"])
        return
    fabric_id = vote(
        Counter(o.fabric_id for o in observations), row.fabric_id if row is not None else None
    )
    by_node = {o.node_id: o for o in observations if o.fabric_id == fabric_id}
    voters = set(
        ManagerObservation.objects.filter(fabric_id=fabric_id).values_list("node_id", flat=True)
    )
    states = Counter(by_node[n].state if n in by_node else GONE for n in voters)
    state = vote(states, row.state if row is not None else None, fallback=GONE)
    if state == GONE:
        if row is not None and (row.state, row.fabric_id) != (GONE, fabric_id):
            row.state, row.fabric_id = GONE, fabric_id
            row.save(update_fields=["state", "fabric"])
        return  # never made up from one node's word: no row for it
    latest = next(o for o in by_node.values() if o.state == state)
    SubnetManager.objects.update_or_create(
        guid=guid,
        defaults={
            "fabric_id": fabric_id,
            "lid": latest.lid,
            "priority": latest.priority,
            "state": state,
            "last_seen": max(o.seen_at for o in observations),
        },
    )


def derive_master(fabric: PhysicalFabric, reported_by: str, now: datetime) -> None:
    claims = Counter(
        ManagerObservation.objects.filter(fabric=fabric, master=True).values_list("guid", flat=True)
    )
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
