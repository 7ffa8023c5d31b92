"""Each process's warm copy of the fleet as placement sees it.

Reading the whole fleet and indexing it costs tens of milliseconds at 5,000
nodes. A process keeps the node views and the scheduler's index instead,
and before each use asks the database which nodes changed since it last
looked: one indexed query on the log that PostgreSQL's triggers write
(migrations/0006_node_changes.py; followed.py has the rule every copy
placement keeps follows) for every change placement reads,
whichever process or app made it. Only those nodes are read again
(Inventory.replace); a node that joined, left, moved in the facility tree
or changed the weights it holds re-indexes the fleet from the views in
memory. Staleness needs no write: each Ready node's deadline is kept, and
at a deadline only a node that has not beaten since is read again.

Why a log with transaction ids rather than a counter: a counter bumped in
every such transaction would serialise the fleet's heartbeats on one row,
and a sequence is assigned before commit, so a transaction that commits
after a younger one would be missed for good. A look reads the rows of
every transaction that had not committed at the previous look (at or
above that snapshot's xmax, or in progress then).

The index holds what is committed, nothing else. A process's own
placements stay in it only once their transaction has committed
(serving.placing holds the process's lock through that commit, so no look
comes between; their log rows are skipped then); made inside a caller's
transaction, they are taken out again when the placing call returns, and
the log reads their nodes once the caller commits: a caller that rolls
back leaves nothing behind. Rows a transaction wrote itself are never
read into the shared index from inside it. A read that fails drops the
index whole: the log's cursor moves only with a look that succeeded. And
the database has the last word: each decision is checked against its
nodes' rows and its domains' power caps, locked, before it commits
(serving.checked); the unique (node, index) claim refuses a card handed
out twice. A stale index makes a placement slower, never wrong.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Literal, overload

from django.db import connection
from django.utils import timezone

from llmgw.database import prepared
from llmgw.inventory import readiness
from llmgw.inventory.models import Node
from llmgw.placement import readings
from llmgw.placement.claims import apply_to_views
from llmgw.placement.scheduler import Inventory
from llmgw.placement.snapshot import node_views, pk_views, views_by_pk
from llmgw.placement.types import READY, Decision, NodeView
from llmgw.serving import warm_sql
from llmgw.serving.followed import IDLE_S, KEEP_S

log = logging.getLogger("llmgw.placement")
# A look slower than this is logged with what it read: every placer of
# the process waits for it.
SLOW_LOOK_S = 0.5

# The log's one freshness rule (followed.py): pruned of rows older than
# KEEP_S, so a process that has not looked for IDLE_S reads the fleet whole.
PRUNE_EVERY_S = 60
# Measured power is the one thing placement reads that the log does not
# follow: every heartbeat carries new readings, 500 a second at 5,000
# nodes, and logging them would have every process read that many nodes
# again each second. A heartbeat's interval: it is no fresher than that.
# The database's check of each decision reads the readings under lock
# (serving.checked), so a stale one costs a decision made again, never a
# cap exceeded.
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
        # The transactions of our committed decisions, applied in memory:
        # their rows come back at the next look, and are skipped then.
        self.skip: set[str] = set()
        # This transaction's id, when the last look was made to write.
        self.own_xid: str | None = None
        # Nodes the looking transaction changed itself (its own log rows,
        # not yet committed), and whether it changed the whole fleet: never
        # read into the index from inside it.
        self.own: set[int] = set()
        self.own_whole = False
        # Their views as read from inside it (private), by name.
        self.own_views: dict[str, NodeView] = {}
        # (deadline, node) for each node Ready by its last heartbeat.
        self.deadlines: list[tuple[datetime, int]] = []
        self.deadline_of: dict[int, datetime] = {}
        # Nodes past their deadline whose row still says Ready: a heartbeat
        # brings them back without a logged change.
        self.lapsed: set[int] = set()
        # Nodes to read again at the next look: read from inside a writing
        # transaction, or found changed by a decision's check.
        self.stale: set[int] = set()
        self.pk_by_name: dict[str, int] = {}
        self.looked_at = self.pruned_at = time.monotonic()
        self.rebuilds = 0
        self.loads = 0
        self.reads = 0
        self.replaced = 0
        # Nodes in a power-capped domain, whose measured draw placement
        # reads: read again every POWER_EVERY_S, as no row logs a reading.
        self.capped: set[int] = set()
        # Capped domain -> its nodes: the candidates the check's sum reads.
        self.members: dict[str, set[int]] = {}
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
        try:
            return self._look(writing, whole)
        except BaseException:
            # A read that failed (a statement timeout, the connection gone)
            # may have moved the cursor past rows it never read: the index
            # is dropped whole, and the next look reads the fleet again.
            self.reset()
            raise

    def _look(self, writing: bool, whole: bool) -> Inventory | None:
        now = time.monotonic()
        if now - self.pruned_at > PRUNE_EVERY_S:
            self.pruned_at = now
            with connection.cursor() as cursor:
                cursor.execute(warm_sql.PRUNE, [KEEP_S])
        # Rows this process never read may have been pruned meanwhile.
        if now - self.looked_at > IDLE_S:
            self.inventory = None
        self.looked_at = now
        if self.inventory is None:
            if not whole:
                return None
            self._start(writing)
            return self._inventory()
        changed, everything, due = self._changes(writing)
        if everything and not whole:
            self.inventory = None
            return None
        if everything:
            self._load_all()
            return self._inventory()
        if changed:
            self._reload(changed)
        # The power readings alone of the rest of the nodes due (placement.readings).
        if due and (moved := readings.moved(due - changed, self.views)):
            self.views.update(moved)
            self._inventory().rewatt(moved.values())
        return self._inventory()

    def private(self) -> Inventory:
        """The fleet as the looking transaction sees it, its own uncommitted
        changes included, for its decisions alone: a copy of the index with
        the nodes it changed read from inside it (the whole fleet, where it
        changed the whole fleet or a node's place in it)."""
        if not self.own_whole and self.inventory is not None:
            views = self._read(self.own)
            if all(v is not None and pk in self.views for pk, v in views.items()):
                self.own_views = {v.name: v for v in views.values() if v is not None}
                try:
                    return self.inventory.replaced(self.own_views.values())
                except ValueError:
                    pass  # its labels or weights changed
        whole = node_views()
        self.own_views = {v.name: v for v in whole}
        return Inventory(whole)

    def look(self) -> None:
        """Bring the index up to date now, outside any transaction, so that
        the look placement makes under its locks reads only what changed
        since. Cold (a new process, or one idle past IDLE_S) the whole fleet
        is read, seconds at 5,000 nodes: made under the model's row lock,
        that read kept every other placer of the model waiting until their
        statement timeouts failed them, and the fleet's heartbeats starved
        behind it on the same cores."""
        if connection.in_atomic_block:
            return
        with self.lock:
            self.current()

    def _inventory(self) -> Inventory:
        assert self.inventory is not None
        return self.inventory

    def exact(self) -> Inventory:
        """The index as the database has it now: what explain judges on.
        The caller holds `lock`."""
        inventory = self.current()
        # Inside a transaction that changed nodes itself, as it sees them.
        return self.private() if self.own or self.own_whole else inventory

    def views_of(self, names: Iterable[str]) -> list[NodeView]:
        """These nodes' views as last read (after exact(): as stored now)."""
        return [
            self.own_views.get(n) or self.views[self.pk_by_name[n]]
            for n in names
            if n in self.pk_by_name or n in self.own_views
        ]

    def _start(self, writing: bool) -> None:
        assign = "pg_current_xact_id()" if writing else "pg_current_xact_id_if_assigned()"
        with connection.cursor() as cursor:
            cursor.execute(warm_sql.START.format(assign=assign))
            text, own, mine = cursor.fetchone()
        self._snapshot(text, own)
        self.skip = set()
        self._own(mine or [])
        self._load_all()
        # Read from inside the transaction that changed them: read again
        # once it has ended.
        self.stale |= self.own

    def _own(self, nodes: Iterable[int | None]) -> None:
        self.own, self.own_whole, self.own_views = set(), False, {}
        for pk in nodes:
            if pk is None:
                self.own_whole = True
            else:
                self.own.add(pk)

    def _snapshot(self, text: str, own: str | None) -> None:
        _, self.xmax, xip = text.split(":")
        self.xip = xip.split(",") if xip else []
        self.own_xid = own
        # A look from inside a transaction that has written (placing by
        # hand locks the model first) sees that transaction as done; the
        # next look, from another, must still read what it commits later.
        if own is not None:
            self.xip.append(own)

    def _changes(self, writing: bool) -> tuple[set[int], bool, set[int]]:
        with prepared.cursor() as cursor:
            cursor.execute(warm_sql.CHANGES, [writing, self.xmax, self.xip])
            rows = cursor.fetchall()
        snapshot, own = rows[0][0], rows[0][1]
        changed: set[int] = set()
        everything = False
        mine: list[int | None] = []
        for _, _, row_id, node_id, xid in rows:
            if row_id is None:
                continue
            if xid == own:
                # This transaction's own, uncommitted: they come back at
                # every look from inside it, and once more after it commits.
                mine.append(node_id)
            elif xid in self.skip:
                continue
            elif node_id is None:
                everything = True
            else:
                changed.add(node_id)
        # Committed before this look's snapshot: never returned again.
        self.skip = set()
        self._snapshot(snapshot, own)
        self._own(mine)
        changed |= self._lapsed() | self.stale
        self.stale = set()
        due: set[int] = set()
        if self.capped and time.monotonic() - self.power_read_at > POWER_EVERY_S:
            self.power_read_at = time.monotonic()
            due = self.capped - self.own
        # A node this transaction changed is not read into the index from
        # inside it (its changes may still roll back): it is read at the
        # first look from outside.
        self.stale |= changed & self.own
        return changed - self.own, everything, due

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
        out = {}
        for pk, state, at, every in warm_sql.beats(wanted):
            deadline = self._deadline(state, at, every, now)
            if deadline is not None:
                out[pk] = deadline
        return out

    @staticmethod
    def _deadline(state: str, at: datetime | None, every: int, now: datetime) -> datetime | None:
        # The one rule (llmgw.inventory.readiness), with the record of
        # hearing this process last read: a deadline here is only when to
        # look again, and a node that lapses is read again, record and all.
        return readiness.deadline(state, at, every, now, readiness.last_known())

    def _follow(self, pks: Iterable[int] | None) -> None:
        """Note the readiness deadlines of these nodes (all when None)."""
        columns = ("pk", "state", "last_heartbeat_at", "heartbeat_interval_s")
        found = Node.objects.values_list(*columns) if pks is None else warm_sql.beats(list(pks))
        now = timezone.now()
        for pk, state, at, every in found:
            deadline = self._deadline(state, at, every, now)
            if deadline is not None:
                heapq.heappush(self.deadlines, (deadline, pk))
                self.deadline_of[pk] = deadline
            elif state == READY and at is not None:
                self.lapsed.add(pk)

    def _load_all(self) -> None:
        self.loads += 1
        # Each view with its pk: reading the names again, in a statement of
        # their own, cost a second round trip over the whole fleet.
        pairs = pk_views()
        self.views = dict(pairs)
        self.order = [pk for pk, _ in pairs]
        self.pk_by_name = {v.name: pk for pk, v in pairs}
        self.deadlines, self.deadline_of, self.lapsed = [], {}, set()
        self._follow(None)
        self._index()

    def _reload(self, pks: set[int]) -> None:
        """Read these nodes again and re-index only them (Inventory.replace),
        unless one joined, was removed or renamed, or changed where it sits
        or what weights it holds: then the fleet is indexed again from the
        views in memory."""
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
        gone = False
        for pk, view in views.items():
            if view is None:
                gone = self.views.pop(pk, None) is not None or gone
            else:
                self.views[pk] = view
        if moved:
            # The database's order (by name, in its collation), as a whole read has it.
            self.order = [
                pk for pk in Node.objects.values_list("pk", flat=True) if pk in self.views
            ]
        elif gone:
            self.order = [pk for pk in self.order if pk in self.views]
        if moved or gone:
            self.pk_by_name = {v.name: pk for pk, v in self.views.items()}
        for pk in pks:
            # Its entry in the heap goes stale: popped, it is skipped.
            self.deadline_of.pop(pk, None)
        self.lapsed -= pks
        self._follow(pks)
        self.reads += len(pks)
        if replaceable and self.inventory is not None:
            self.inventory.replace(v for v in views.values() if v is not None)
            self.replaced += len(pks)
        else:
            self._index()

    @staticmethod
    def _read(pks: set[int]) -> dict[int, NodeView | None]:
        """These nodes' views as stored now; None for a node gone."""
        return views_by_pk(pks)

    def _index(self) -> None:
        self.inventory = Inventory(self.views[pk] for pk in self.order)
        self.members = {}
        for pk, v in self.views.items():
            for key, _ in v.budgets:
                self.members.setdefault(key, set()).add(pk)
        self.capped = set().union(*self.members.values())
        self.rebuilds += 1

    def in_domains(self, keys: Iterable[str]) -> set[int]:
        """The nodes in these capped domains as last read, and those the
        looking transaction changed itself (the database's check of a
        decision's power adds every node changed since the look)."""
        return set().union(self.own, *(self.members.get(k, ()) for k in keys))

    # -- our own decisions ---------------------------------------------------

    def committed(self, decisions: list[Decision], xid: str | None) -> None:
        """Our decisions committed, with no look since they were applied to
        the index (serving.placing holds `lock` from its look through its
        commit): their nodes' views now read as the decisions left them,
        and the log rows their transaction `xid` wrote are skipped."""
        for d in decisions:
            pks = self._nodes_of([d])
            after = apply_to_views([self.views[pk] for pk in pks], d)
            for pk, view in zip(pks, after, strict=True):
                self.views[pk] = view
        if xid is not None:
            self.skip.add(xid)

    def restore(self, decisions: list[Decision]) -> None:
        """Take out of the index the decisions applied to it that never
        committed (or have yet to): their nodes read as last read."""
        if self.inventory is None:
            return
        pks = set(self._nodes_of(decisions))
        try:
            self.inventory.replace(self.views[pk] for pk in pks if pk in self.views)
        except ValueError:
            # A node's labels or weights changed inside the transaction:
            # the index cannot be mended node by node.
            self.reset()

    def read_again(self, pks: set[int]) -> None:
        """Nodes found changed by a decision's check: read at the next look."""
        self.stale |= pks

    def _nodes_of(self, decisions: list[Decision]) -> list[int]:
        return [self.pk_by_name[n] for d in decisions for n in d.nodes if n in self.pk_by_name]


FLEET = WarmFleet()
