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

from django.db import connection

from llmgw.database import rows
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
    # GUID -> fabric key of this node's observations.
    mine = dict(_fetch(_MINE, [node.pk]))
    before = set(mine.values())
    after = {s.fabric.pk for s in seen.values()} | (set() if listed else before)
    if listed and mine:
        ManagerObservation.objects.filter(node=node).exclude(guid__in=list(seen)).delete()
    # One statement for all of them: a node joining lists a manager or
    # two per fabric, and thousands join at once. A node that had no
    # observations (every node joining) has only these rows, so their
    # master flags are set here rather than moved by two updates a fabric.
    rows.insert(
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
        unique=("node", "guid"),
        update=("fabric", "lid", "priority", "state", "master", "seen_at"),
    )
    for fabric_id, guid in claims.items() if mine else ():
        observed = ManagerObservation.objects.filter(node=node, fabric_id=fabric_id)
        observed.exclude(guid=guid).update(master=False)
        observed.filter(guid=guid).update(master=True)
    records = records_of(set(mine) | set(seen), before ^ after)
    agreed = {g for g, s in seen.items() if g not in mine and records.get(g, _NONE).agrees(s)}
    derive_managers(sorted(_changed(mine, seen, records, before, after) - agreed), records)
    if agreed:
        # Still said by a node, now: the record's time, though no vote moved.
        rows.seen_again(SubnetManager, "guid", sorted(agreed), now)
    # The fabrics this report named are loaded already; only one it no
    # longer names is read (a queryset composed anew for each report was
    # a tenth of a joining node's durable store). By identity, the
    # model's order, as the rows were always locked in.
    loaded = {s.fabric.pk: s.fabric for s in seen.values()}
    for pk in (before | after) - loaded.keys():
        loaded.update((f.pk, f) for f in rows.read(PhysicalFabric, id=pk))
    named = (loaded[pk] for pk in before | after if pk in loaded)
    for fabric in sorted(named, key=lambda f: f.identity):
        # A node naming the master only adds to its count; one new to the
        # fabric naming none changes no count. Nothing to count again.
        claim = claims.get(fabric.pk)
        if claim != fabric.master_guid and (claim is not None or fabric.pk in before):
            derive_master(fabric, node.name, now)


@dataclass(frozen=True)
class Record:
    """A SubnetManager row, as the vote last left it."""

    id: int | None
    fabric_id: int | None
    state: str
    lid: int | None = None
    priority: int | None = None

    def agrees(self, s: Seen) -> bool:
        said = (s.fabric.pk, s.state, s.lid, s.priority)
        return self.state != GONE and (self.fabric_id, self.state, self.lid, self.priority) == said


_NONE = Record(None, None, GONE)


def records_of(guids: set[str], fabrics: set[int]) -> dict[str, Record]:
    """The records of `guids`, and every one on `fabrics`, by GUID."""
    found = _fetch(_RECORDS, [sorted(guids), sorted(fabrics)])
    return {row[0]: Record(*row[1:]) for row in found}


def _changed(
    mine: dict[str, int],
    seen: dict[str, Seen],
    records: dict[str, Record],
    before: set[int],
    after: set[int],
) -> set[str]:
    """The GUIDs whose vote this report can have moved. Its own observations
    (old and new); and on a fabric it began or stopped observing, every
    other manager, for which it now counts, or no longer counts, as GONE.
    One more GONE cannot move a manager already GONE."""
    changed = set(mine) | set(seen)
    for guid, r in records.items():
        if guid not in changed and (
            r.fabric_id in before - after or (r.fabric_id in after - before and r.state != GONE)
        ):
            changed.add(guid)
    return changed


def derive_managers(guids: list[str], records: dict[str, Record]) -> None:
    """The fabric's record of each manager, from every node's observation of
    it. Counted by the database: each of a fabric's thousands of nodes
    observes its managers, and a node joining must not read them all. A
    statement per step for all of `guids`, not five per GUID, each plain
    SQL rather than the ORM's (llmgw.database.rows): a node joining names
    two managers a fabric, and thousands join at once. `records`: the
    SubnetManager rows of (at least) `guids`, by GUID."""
    if not guids:
        return
    # Per GUID: (fabric key, state, how many nodes say so, when last, and
    # the lid and priority of the latest to say so).
    counted: dict[str, list[tuple[Any, ...]]] = {guid: [] for guid in guids}
    for row in _fetch(_COUNTED, [guids]):
        counted[row[0]].append(row[1:])
    chosen: dict[str, int] = {}
    for guid in guids:
        record, by_state = records.get(guid), counted[guid]
        if not by_state:
            # Kept, not deleted: the GUID carries the fabric's name through a
            # failover. Marked: it is no standby anyone can fail over to.
            if record is not None and record.state != GONE:
                SubnetManager.objects.filter(pk=record.id).update(state=GONE)
            continue
        by_fabric: Counter[int] = Counter()
        for fabric_id, _, n, *_ in by_state:
            by_fabric[fabric_id] += n
        chosen[guid] = vote(by_fabric, record.fabric_id if record is not None else None)
    voters = dict(_fetch(_VOTERS, [sorted(set(chosen.values()))])) if chosen else {}
    managers = []
    for guid, fabric_id in chosen.items():
        record, by_state = records.get(guid), counted[guid]
        # One observation per node and GUID (a constraint): a state per node.
        states = Counter({c[1]: c[2] for c in by_state if c[0] == fabric_id})
        # A node observing the fabric but not this manager says it is GONE.
        if voters[fabric_id] > states.total():
            states[GONE] += voters[fabric_id] - states.total()
        state = vote(states, record.state if record is not None else None, fallback=GONE)
        if state == GONE:
            if record is not None and (record.state, record.fabric_id) != (GONE, fabric_id):
                SubnetManager.objects.filter(pk=record.id).update(state=GONE, fabric=fabric_id)
            continue  # never made up from one node's word: no row for it
        [(lid, priority)] = [(c[4], c[5]) for c in by_state if c[:2] == (fabric_id, state)]
        managers.append(
            SubnetManager(
                guid=guid,
                fabric_id=fabric_id,
                lid=lid,
                priority=priority,
                state=state,
                last_seen=max(c[3] for c in by_state),
            )
        )
    # What update_or_create did for each, in one statement.
    rows.insert(
        managers, unique=("guid",), update=("fabric", "lid", "priority", "state", "last_seen")
    )


_OBSERVATIONS = ManagerObservation._meta.db_table
_MINE = f"SELECT guid, fabric_id FROM {_OBSERVATIONS} WHERE node_id = %s"
_MANAGERS = SubnetManager._meta.db_table
# The records of a report's GUIDs, and every one on a fabric it began or
# stopped observing.
_RECORDS = f"""
SELECT guid, id, fabric_id, state, lid, priority FROM {_MANAGERS}
WHERE guid = ANY(%s) OR fabric_id = ANY(%s)
"""
# The lid and priority of the latest by seen_at, as order_by("-seen_at").first() took them.
_COUNTED = f"""
SELECT guid, fabric_id, state, count(*), max(seen_at),
       (array_agg(lid ORDER BY seen_at DESC))[1], (array_agg(priority ORDER BY seen_at DESC))[1]
FROM {_OBSERVATIONS} WHERE guid = ANY(%s) GROUP BY guid, fabric_id, state
"""
# How many nodes observe each fabric.
_VOTERS = f"""
SELECT fabric_id, count(DISTINCT node_id) FROM {_OBSERVATIONS}
WHERE fabric_id = ANY(%s) GROUP BY fabric_id
"""
_CLAIMS = (
    f"SELECT guid, count(*) FROM {_OBSERVATIONS} WHERE fabric_id = %s AND master GROUP BY guid"
)


def _fetch(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def derive_master(fabric: PhysicalFabric, reported_by: str, now: datetime) -> None:
    claims = Counter(dict(_fetch(_CLAIMS, [fabric.pk])))
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
