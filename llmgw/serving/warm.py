"""Each process's warm copy of the fleet as placement sees it.

Reading the whole fleet and indexing it costs tens of milliseconds at 5,000
nodes, and the reconciler and the place API did both on every decision. A
process keeps the node views and the scheduler's index instead, and before
each use asks the database which nodes changed since it last looked: one
indexed query on the log that PostgreSQL's triggers write
(migrations/0006_node_changes.py) for every change of capacity, claims,
cordons, labels, engines, ports and weights, whichever process or app made
it. Only those nodes are read again.

Why a log with transaction ids rather than a counter: a counter bumped in
every such transaction would serialise the fleet's heartbeats on one row,
and a plain sequence is assigned before commit, so a transaction that
commits after a younger one would be missed for good. Each log row carries
its transaction's id, and a look reads the rows of every transaction that
had not committed at the previous look (at or above that snapshot's xmax,
or in progress then): one that commits late is still read, and each row
is read once, through the index, however long some other transaction runs.

A process's own placements are applied to its index in memory as they
are made, under the lock (their log rows are skipped once they commit;
their nodes are read again if they roll back), so a worker placing in a
loop re-indexes nothing, and several placements in one transaction are
each made on the claims of those before. Any other change (another process's placement, a
release, a cordon, a card gone bad) reads the changed nodes again and
re-indexes only them (Inventory.replace); a node that joined, left, moved
in the facility tree or changed the weights it holds re-indexes the fleet
from the views in memory. Staleness needs no write:
each Ready node's deadline (last heartbeat + the missed-heartbeat grace) is
kept; at a deadline the node's last heartbeat is looked up, and only a
node that has not beaten since is read again.

Two workers placing at once still never hand out one GPU twice: the warm
index is only read under placement's advisory lock, after the check, in
the transaction that writes the claims (serving.placing), and the unique
(node, index) claim refuses what slipped past anyway. SQLite (the embedded
default, one process) has no log: there the fleet is read whole each time.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Literal, overload

from django.conf import settings
from django.db import connection
from django.utils import timezone

from llmgw.database import prepared
from llmgw.inventory.models import Node
from llmgw.placement.scheduler import Inventory
from llmgw.placement.snapshot import node_views
from llmgw.placement.types import READY, Decision, NodeView
from llmgw.serving import warm_sql

log = logging.getLogger("llmgw.placement")
# A look slower than this is logged with what it read: every placer of
# the process waits for it.
SLOW_LOOK_S = 0.5

# The log is pruned of rows older than the mark set at least KEEP_S ago
# (every transaction below that mark had finished when it was set); a
# process that has not looked for IDLE_S (well under KEEP_S) reads the
# fleet whole instead of trusting a log that may have lost its rows.
KEEP_S = 600
IDLE_S = 300
PRUNE_EVERY_S = 60
# A heartbeat's interval: measured power is no fresher than that.
POWER_EVERY_S = 10


class WarmFleet:
    def __init__(self) -> None:
        # Held while the index is read or changed: a web process serves
        # requests on threads.
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        self.views: dict[int, NodeView] = {}
        self.order: list[int] = []
        self.inventory: Inventory | None = None
        # The last look's snapshot: its xmax and the transactions in progress.
        self.xmax = "0"
        self.xip: list[str] = []
        # Log rows already read that a look can return again (this
        # transaction's own), by id -> transaction.
        self.seen: dict[int, str] = {}
        # The transactions of our committed decisions, applied in memory:
        # their rows come back at the next look, and are skipped then.
        self.skip: set[str] = set()
        # This transaction's id, when the last look was made to write.
        self.own_xid: str | None = None
        # (deadline, node) for each node Ready by its last heartbeat.
        self.deadlines: list[tuple[datetime, int]] = []
        self.deadline_of: dict[int, datetime] = {}
        # Nodes past their deadline whose row still says Ready: a heartbeat
        # brings them back without a logged change.
        self.lapsed: set[int] = set()
        # Nodes our own decisions changed in the index; their views are old.
        self.dirty: set[int] = set()
        # Nodes our own decisions changed in the index whose transaction
        # rolled back: read again at the next look.
        self.stale: set[int] = set()
        self.pk_by_name: dict[str, int] = {}
        # Bumped at every look at the log: a decision made before one is
        # not applied after it.
        self.generation = 0
        self.looked_at = self.pruned_at = time.monotonic()
        self.rebuilds = 0
        self.loads = 0
        self.reads = 0
        self.replaced = 0
        # Nodes in a power-capped domain, whose measured draw placement
        # reads: read again every POWER_EVERY_S, as no row logs a reading.
        self.capped: set[int] = set()
        self.power_read_at = time.monotonic()
        # Cold, kept (keep): the snapshot from which the log is watched for
        # a change of the whole fleet before the fleet is read.
        self.quiet_from: str | None = None

    # -- reading -------------------------------------------------------------

    @overload
    def current(self, writing: bool = False) -> Inventory: ...
    @overload
    def current(self, writing: bool = False, *, whole: Literal[False]) -> Inventory | None: ...

    def current(self, writing: bool = False, *, whole: bool = True) -> Inventory | None:
        """The index as the database has it now; the caller holds `lock`.
        `writing`: the caller's transaction goes on to write what it
        decides (own_xid is then its id). Not `whole`: None, and the index
        dropped, where the fleet would have to be read whole."""
        if connection.vendor != "postgresql":
            return Inventory(node_views())
        started = time.monotonic()
        before = (self.loads, self.reads, self.rebuilds)
        try:
            return self._current(writing, whole)
        finally:
            took = time.monotonic() - started
            if took > SLOW_LOOK_S:
                loads, reads, rebuilds = (
                    a - b
                    for a, b in zip((self.loads, self.reads, self.rebuilds), before, strict=True)
                )
                log.info(
                    "warm fleet: a look took %.2f s (%s whole-fleet reads, %s nodes read again, "
                    "%s re-indexings)",
                    took,
                    loads,
                    reads,
                    rebuilds,
                )

    def _current(self, writing: bool, whole: bool) -> Inventory | None:
        now = time.monotonic()
        if now - self.pruned_at > PRUNE_EVERY_S:
            self.pruned_at = now
            with connection.cursor() as cursor:
                cursor.execute(warm_sql.PRUNE, [KEEP_S])
        # Rows this process never read may have been pruned meanwhile.
        if now - self.looked_at > IDLE_S:
            self.inventory = None
        self.looked_at = now
        self.generation += 1
        if self.inventory is None:
            if not whole:
                return None
            self._start(writing)
            return self._inventory()
        changed, everything = self._changes(writing)
        if everything and not whole:
            self.inventory = None
            return None
        if everything:
            self._load_all()
        elif changed:
            self._reload(changed)
        return self._inventory()

    def look(self) -> None:
        """Bring the index up to date now, outside any transaction, so that
        the look placement makes under its locks reads only what changed
        since. Cold (a new process, or one idle past IDLE_S) the whole fleet
        is read, seconds at 5,000 nodes: made under the model's row lock,
        that read kept every other placer of the model waiting until their
        statement timeouts failed them, and the fleet's heartbeats starved
        behind it on the same cores."""
        if connection.vendor != "postgresql" or connection.in_atomic_block:
            return
        with self.lock:
            self.current()

    def keep(self) -> None:
        """Keep the index warm from a thread of the process's own
        (serving.keep_warm), outside any transaction, so that the first
        placement or explain after a deploy does not read the fleet whole
        while every other placer of the process waits.

        Warm, it looks as a placement would, but a change of the whole fleet
        (a fabric mapped, a hold, a budget) drops the index rather than
        reading 5,000 nodes in the background. Cold, it reads the fleet
        only once the log has shown no such change for a whole interval:
        while a fleet joins, its fabrics are mapped again and again, and a
        whole read at each look (7-11 s of CPU under load) starved the
        joining nodes' heartbeats until they lapsed."""
        if connection.vendor != "postgresql" or connection.in_atomic_block:
            return
        with self.lock:
            quiet = self.quiet_from
            self.quiet_from = None
            if self.inventory is None and quiet and not self._whole_change_since(quiet):
                self.current()
                return
            if self.inventory is not None and self.current(whole=False) is not None:
                return
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_current_snapshot()::text")
                self.quiet_from = cursor.fetchone()[0]

    @staticmethod
    def _whole_change_since(snapshot: str) -> bool:
        """Whether a change of the whole fleet was logged by a transaction
        that had not committed at `snapshot`."""
        _, xmax, xip = snapshot.split(":")
        with connection.cursor() as cursor:
            cursor.execute(warm_sql.WHOLE_SINCE, [xmax, xip.split(",") if xip else []])
            return bool(cursor.fetchone()[0])

    def _inventory(self) -> Inventory:
        assert self.inventory is not None
        return self.inventory

    def exact(self) -> Inventory:
        """The index as the database has it now, the nodes our own decisions
        changed in memory read again: what explain judges on, in the words a
        fresh index would use. The caller holds `lock`."""
        if connection.vendor != "postgresql":
            return Inventory(node_views())
        self.current()
        if self.dirty:
            self._reload(set(), exact=True)
        return self._inventory()

    def views_of(self, names: Iterable[str]) -> list[NodeView]:
        """These nodes' views as last read (after exact(): as stored now)."""
        if connection.vendor != "postgresql":
            wanted = set(names)
            return [v for v in node_views() if v.name in wanted]
        return [self.views[self.pk_by_name[n]] for n in names if n in self.pk_by_name]

    def _start(self, writing: bool) -> None:
        assign = "pg_current_xact_id()" if writing else "pg_current_xact_id_if_assigned()"
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_current_snapshot()::text, {assign}::text")
            self._snapshot(*cursor.fetchone())
        self.seen, self.skip = {}, set()
        self._load_all()

    def _snapshot(self, text: str, own: str | None) -> None:
        _, self.xmax, xip = text.split(":")
        self.xip = xip.split(",") if xip else []
        self.own_xid = own
        # A look from inside a transaction that has written (placing by
        # hand locks the model first) sees that transaction as done; the
        # next look, from another, must still read what it commits later.
        if own is not None:
            self.xip.append(own)

    def _changes(self, writing: bool) -> tuple[set[int], bool]:
        with prepared.cursor() as cursor:
            cursor.execute(warm_sql.CHANGES, [writing, self.xmax, self.xip])
            rows = cursor.fetchall()
        snapshot, own = rows[0][0], rows[0][1]
        changed: set[int] = set()
        everything = False
        returned: set[int] = set()
        for _, _, row_id, node_id, xid in rows:
            if row_id is None:
                continue
            returned.add(row_id)
            if row_id in self.seen or xid in self.skip:
                continue
            if node_id is None:
                everything = True
            else:
                changed.add(node_id)
        # This transaction's rows come back at every look; our decisions'
        # come back once, at the first look after they committed.
        self.seen = {
            **{r[2]: r[4] for r in rows if r[2] is not None and r[4] == own},
            **{i: x for i, x in self.seen.items() if i not in returned},
        }
        # Committed before this look's snapshot: never returned again.
        self.skip = set()
        self._snapshot(snapshot, own)
        changed |= self._lapsed() | self.stale
        self.stale = set()
        if self.capped and time.monotonic() - self.power_read_at > POWER_EVERY_S:
            self.power_read_at = time.monotonic()
            changed |= self.capped
        return changed, everything

    def _lapsed(self) -> set[int]:
        """Nodes whose readiness the clock changed since the last look."""
        now = timezone.now()
        due: set[int] = set()
        while self.deadlines and self.deadlines[0][0] < now:
            deadline, pk = heapq.heappop(self.deadlines)
            if self.deadline_of.get(pk) == deadline:
                del self.deadline_of[pk]
                due.add(pk)
        # A deadline comes due for every node once per grace period, and
        # nearly every one has beaten since: its view is as it was, only its
        # deadline moves. Read again, all 5,000 a process had not looked at
        # for half a minute cost it seconds before it could place.
        # One query for them and for the lapsed nodes a heartbeat may have
        # brought back (those are read again: their views say NotReady).
        moved = self._moved_deadlines(due | self.lapsed, now)
        back = self.lapsed & moved.keys()
        self.lapsed -= back
        for pk in (due & moved.keys()) - back:
            heapq.heappush(self.deadlines, (moved[pk], pk))
            self.deadline_of[pk] = moved[pk]
        return (due - moved.keys()) | back

    def _moved_deadlines(self, pks: Iterable[int], now: datetime) -> dict[int, datetime]:
        """The deadline of each of these nodes that is Ready by its last
        heartbeat, by node."""
        wanted = list(pks)
        if not wanted:
            return {}
        # One array (the warm fleet runs on PostgreSQL) rather than
        # thousands of IN parameters, which the driver spends most of a
        # second splitting into the query.
        with connection.cursor() as cursor:
            cursor.execute(warm_sql.DEADLINES, [wanted])
            rows = cursor.fetchall()
        out = {}
        for pk, state, at, every in rows:
            deadline = self._deadline(state, at, every, now)
            if deadline is not None:
                out[pk] = deadline
        return out

    @staticmethod
    def _deadline(state: str, at: datetime | None, every: int, now: datetime) -> datetime | None:
        if state != READY or at is None:
            return None
        deadline = at + timedelta(seconds=every * settings.MISSED_HEARTBEATS_NOT_READY)
        return deadline if deadline >= now else None

    def _follow(self, pks: Iterable[int] | None) -> None:
        """Note the readiness deadlines of these nodes (all when None)."""
        rows = Node.objects.all() if pks is None else Node.objects.filter(pk__in=list(pks))
        now = timezone.now()
        for pk, state, at, every in rows.values_list(
            "pk", "state", "last_heartbeat_at", "heartbeat_interval_s"
        ):
            deadline = self._deadline(state, at, every, now)
            if deadline is not None:
                heapq.heappush(self.deadlines, (deadline, pk))
                self.deadline_of[pk] = deadline
            elif state == READY and at is not None:
                self.lapsed.add(pk)

    def _load_all(self) -> None:
        self.loads += 1
        self.pk_by_name = dict(Node.objects.values_list("name", "pk"))
        views = node_views()
        self.views = {self.pk_by_name[v.name]: v for v in views}
        self.order = [self.pk_by_name[v.name] for v in views]
        self.deadlines, self.deadline_of, self.lapsed, self.dirty = [], {}, set(), set()
        self.stale = set()
        self._follow(None)
        self._index()

    def _reload(self, changed: set[int], exact: bool = False) -> None:
        """Read these nodes again and re-index only them (Inventory.replace),
        unless one joined, was removed or renamed, or changed where it sits
        or what weights it holds: then the fleet is indexed again from the
        views in memory. `exact`: also the nodes our own decisions changed
        in memory."""
        pks = changed | self.dirty if exact else set(changed)
        views = self._read(pks)
        # A node joined or was renamed: its place in node order is new. It is
        # read alone, not the fleet with it: a fleet joining at 5,000 nodes
        # had every process read every node each time it looked (6-8 s).
        moved = any(
            v is not None and (pk not in self.views or self.views[pk].name != v.name)
            for pk, v in views.items()
        )
        replaceable = (
            not moved
            and self.inventory is not None
            and all(
                v is not None
                and v.labels == self.views[pk].labels
                and v.holds_weights == self.views[pk].holds_weights
                for pk, v in views.items()
            )
        )
        if not replaceable and self.dirty - pks:
            # Indexed again from the views, which for the nodes our own
            # decisions changed in memory are older than those decisions.
            extra = self.dirty - pks
            views.update(self._read(extra))
            pks |= extra
        for pk, view in views.items():
            if view is None:
                self.views.pop(pk, None)
            else:
                self.views[pk] = view
        if moved:
            # The database's order (by name, in its collation), as a whole read has it.
            self.order = [
                pk for pk in Node.objects.values_list("pk", flat=True) if pk in self.views
            ]
        else:
            self.order = [pk for pk in self.order if pk in self.views]
        self.pk_by_name = {v.name: pk for pk, v in self.views.items()}
        for pk in pks:
            # Its entry in the heap goes stale: popped, it is skipped.
            self.deadline_of.pop(pk, None)
        self.lapsed -= pks
        self._follow(pks)
        self.reads += len(pks)
        self.dirty -= pks
        if replaceable and self.inventory is not None:
            self.inventory.replace(v for v in views.values() if v is not None)
            self.replaced += len(pks)
        else:
            self.dirty = set()
            self._index()

    @staticmethod
    def _read(pks: set[int]) -> dict[int, NodeView | None]:
        """These nodes' views as stored now; None for a node gone."""
        fresh = {v.name: v for v in node_views(only=pks)}
        names = dict(Node.objects.filter(pk__in=pks).values_list("pk", "name"))
        return {pk: fresh.get(names.get(pk, "")) for pk in pks}

    def _index(self) -> None:
        self.inventory = Inventory(self.views[pk] for pk in self.order)
        self.capped = {pk for pk, v in self.views.items() if v.budgets}
        self.rebuilds += 1

    # -- our own decisions ---------------------------------------------------

    def committed(self, decisions: list[Decision], xid: str | None, generation: int) -> None:
        """Our decisions committed. They were applied to the index as they
        were made (serving.placing, under `lock`); their nodes' views are
        now old (`dirty`), and the log rows their transaction `xid` wrote
        (current(writing=True) named it) are skipped. If the index was
        looked at since (`generation` moved: another thread of this
        process), the rows are read like any other change: that look may
        have read those nodes, or the fleet, before the commit."""
        with self.lock:
            if self.inventory is None:
                return
            self.dirty |= self._nodes_of(decisions)
            if xid is not None and generation == self.generation:
                self.skip.add(xid)

    def forget(self, decisions: list[Decision]) -> None:
        """Decisions applied to the index whose transaction did not commit:
        their nodes are read again at the next look."""
        with self.lock:
            self.stale |= self._nodes_of(decisions)

    def _nodes_of(self, decisions: list[Decision]) -> set[int]:
        return {self.pk_by_name[n] for d in decisions for n in d.nodes if n in self.pk_by_name}


FLEET = WarmFleet()
