"""When a node is Ready: the one rule that the API, the console, the
metrics, placement's views and its warm index, and the staleness pass
(whose stored state routing and the reconciler follow) all read.

A node is NotReady once it has been silent for LLMGW_MISSED_HEARTBEATS
of its intervals *while the control plane could hear it*. Counting wall
time instead took the control plane's own outages for the fleet's: after
PostgreSQL was stopped for 45 s, every node read NotReady for some 18 s
after it came back, and after both web processes and both workers were
killed the workers marked 160 and 144 nodes NotReady in the second after
they restarted, though no node had stopped.

So the web processes, where heartbeats come in, record that they can
hear (`listening`): every TICK_S each writes the time to one row while
its database answers. A write finding the last one older than GAP_S
starts a new stretch of hearing (`since`), and a node's silence is
counted from the later of its last heartbeat and `since`, up to the last
moment the control plane could hear (no later than GAP_S after the last
write). After an outage or a restart, every node has a full grace to be
heard again; while no one can hear, no node goes NotReady.

Hearing is also answering in time. After a five-minute outage of a
5,000-node layout, the returning fleet's heartbeats waited longer than
the agents' timeout in the web processes' queues while their hearing
threads kept writing, and 5,744 NotReady marks followed for nodes that
had never stopped. So a web process BEHIND_S or more behind with its
heartbeats (the oldest one not yet answered, or its event loop not
running at all) writes a new stretch instead: while any web process is
that far behind, every node's grace starts again, and no node is marked
for silence the control plane made itself.

A web process that starts writes a new stretch too. Every process
killed and started again within GAP_S left no gap in the record, yet no
one could hear while they were down and 5,000 returning agents (their
heartbeats and command streams at once) took the restarted processes
20-30 s to hear: 262 and then 2,154 nodes were marked in bench-fleet's
restart. A restart gives every node a full grace, as an outage does.

And the fleet needs time to come back. After a start or a gap, the
agents return as fast as they retry and the web processes can answer:
after every process of bench-fleet's 5,000-node layout was restarted on
2 cores, the last nodes were heard 31-38 s later, past the 30 s grace,
and 229 nodes that never stopped were marked and 8 replicas moved. So
the web process whose start or gap began the stretch keeps writing new
ones (`returning`) while fewer than RETURNED of the nodes Ready before
have been heard since, for at most RETURN_GRACES graces, and only while
they keep coming back: once some have and then none has for a heartbeat
interval (every live agent beats or retries within one), the rest are
silent for themselves. A node that really died meanwhile is still
marked, a grace after the return ends. Only the process that began a
return extends it, so two processes cannot keep each other's going.

Where no web process ever wrote the row (a server without the ASGI
lifespan, the tests' own clients) nothing is known of outages, and
silence is counted in wall time, as before.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q

from llmgw.database import rows
from llmgw.database.atomic import atomic
from llmgw.inventory.choices import NodeState
from llmgw.inventory.models import Hearing as HearingRow
from llmgw.inventory.models import Node

log = logging.getLogger("llmgw.inventory")

# How often each web process says it can hear.
TICK_S = 2.0
# A write this much later than the one before starts a new stretch: the
# control plane could not hear in between (its database or every web
# process was down). Three ticks, so that one slow tick on a loaded
# machine is not taken for an outage; a false one only gives every node
# one more grace.
GAP_S = 3 * TICK_S
# A web process whose oldest heartbeat not yet answered is older than this
# is not hearing its fleet in time: half the agent's request timeout
# (llmgw_agent.client, 10 s), so an agent whose heartbeat is that late has
# been counted as unheard before it gives up on the answer.
BEHIND_S = 5.0


# The share of the fleet that must be heard again before a return is
# over, and the most graces a return may last.
RETURNED = 0.9
RETURN_GRACES = 3
# A return is over once nodes have begun coming back and none has for the
# longest heartbeat interval in use, and never sooner than this: an agent that cannot reach
# the control plane retries at least this often (llmgw_agent's
# RETRY_CAP_S). Without it, 4 nodes of 10 powered off just before a slow
# tick left the other 6 a return that could never reach RETURNED, and the
# dead were marked three graces late.
QUIET_S = 10.0


@dataclass(frozen=True)
class Hearing:
    """The stretch of hearing the control plane is in: since when, and the
    last time it knew it could hear (None, None: nothing recorded).
    `began`: the write that returned it began the stretch after the
    control plane could not hear (a process's start, or a gap)."""

    since: datetime | None
    heard_at: datetime | None
    began: bool = False

    def heard_to(self, now: datetime) -> datetime:
        """The last moment counted as listening: now, unless the writes
        stopped (then GAP_S after the last)."""
        if self.heard_at is None:
            return now
        return min(now, self.heard_at + timedelta(seconds=GAP_S))


UNRECORDED = Hearing(None, None)


def grace(interval_s: int) -> timedelta:
    return timedelta(seconds=interval_s * settings.MISSED_HEARTBEATS_NOT_READY)


def _start(at: datetime, hearing: Hearing) -> datetime:
    return at if hearing.since is None else max(at, hearing.since)


def remaining(
    state: str, at: datetime | None, interval_s: int, now: datetime, hearing: Hearing
) -> timedelta | None:
    """How much of its grace a node has left (negative: spent); None for a
    node not Ready on record (marked NotReady, or never heard)."""
    if state != NodeState.READY or at is None:
        return None
    return grace(interval_s) - (hearing.heard_to(now) - _start(at, hearing))


def is_ready(
    state: str, at: datetime | None, interval_s: int, now: datetime, hearing: Hearing
) -> bool:
    left = remaining(state, at, interval_s, now, hearing)
    return left is not None and left >= timedelta(0)


def deadline(
    state: str, at: datetime | None, interval_s: int, now: datetime, hearing: Hearing
) -> datetime | None:
    """When a Ready node goes NotReady if the control plane keeps hearing
    and the node does not beat; None if it is not Ready now. A node Ready
    past that moment only because no one can hear it now is looked at
    again in a tick."""
    if not is_ready(state, at, interval_s, now, hearing):
        return None
    assert at is not None
    lapses = _start(at, hearing) + grace(interval_s)
    return lapses if lapses >= now else now + timedelta(seconds=TICK_S)


def silent_before(interval_s: int, now: datetime, hearing: Hearing) -> datetime | None:
    """Ready nodes of this interval last heard before this moment are
    NotReady; None when none can be (a stretch of hearing younger than
    the grace)."""
    cutoff = hearing.heard_to(now) - grace(interval_s)
    if hearing.since is not None and hearing.since >= cutoff:
        return None
    return cutoff


def ready_q(now: datetime, hearing: Hearing) -> Q:
    """is_ready in SQL. One term per interval in use (a fleet has one or
    two): a plain comparison of each, without interval arithmetic in
    SQL."""
    intervals = Node.objects.order_by().values_list("heartbeat_interval_s", flat=True).distinct()
    fresh = Q(pk__in=[])
    for s in intervals:
        cutoff = silent_before(s, now, hearing)
        if cutoff is None:
            fresh |= Q(heartbeat_interval_s=s, last_heartbeat_at__isnull=False)
        else:
            fresh |= Q(heartbeat_interval_s=s, last_heartbeat_at__gte=cutoff)
    return Q(state=NodeState.READY) & fresh


# --- reading the record -----------------------------------------------------

_latest = UNRECORDED
_memo = threading.local()


def load() -> Hearing:
    """The record, read now (one query)."""
    global _latest
    # Composed once: a page, a pass and each read of a few nodes ask.
    found = rows.values("hearing", _hearing, "id", None)
    _latest = UNRECORDED if not found else Hearing(*found[0])
    return _latest


def _hearing() -> Any:
    return HearingRow.objects.filter(pk=1).values_list("since", "heard_at")


def at(now: datetime) -> Hearing:
    """The record as of `now`, read once for each `now` a thread asks
    with: a page or a pass takes its `now` once and asks for each of its
    nodes, and must not read the row once per node."""
    memo: tuple[datetime, Hearing] | None = getattr(_memo, "value", None)
    if memo is not None and memo[0] == now:
        return memo[1]
    hearing = load()
    _memo.value = (now, hearing)
    return hearing


def last_known() -> Hearing:
    """The record as this process last read or wrote it, without a query:
    for a hint that is checked against the database before it counts (the
    warm index's deadlines, whose nodes are read again when they lapse)."""
    return _latest


# --- writing it -------------------------------------------------------------


@atomic
def heard(
    now: datetime, behind_s: float = 0.0, started: bool = False, returning: bool = False
) -> Hearing:
    """This web process can hear the fleet at `now`; `behind_s`: how far
    behind it is with the heartbeats it has been sent, `started`: whether
    it has just started, and `returning`: whether the fleet is still
    coming back from a return this process began (any of them: a new
    stretch from now)."""
    global _latest
    row = HearingRow.objects.select_for_update().filter(pk=1).first()
    began = started
    if row is None:
        row = HearingRow.objects.create(pk=1, since=now, heard_at=now)
    elif behind_s >= BEHIND_S or started or returning:
        # Logged once an episode by the caller (llmgw.inventory.listening).
        row.since = row.heard_at = max(now, row.heard_at)
        row.save(update_fields=["since", "heard_at"])
    elif (now - row.heard_at).total_seconds() > GAP_S:
        began = True
        log.warning(
            "the control plane could not hear its fleet from %s to %s; every node has "
            "its full grace from now",
            row.heard_at.isoformat(timespec="seconds"),
            now.isoformat(timespec="seconds"),
        )
        row.since = row.heard_at = now
        row.save(update_fields=["since", "heard_at"])
    elif now > row.heard_at:
        row.heard_at = now
        row.save(update_fields=["heard_at"])
    _latest = Hearing(row.since, row.heard_at)
    return Hearing(row.since, row.heard_at, began)


@dataclass
class Return:
    """A return one process began, as its ticks follow it: when it began,
    the fewest nodes not heard since, and when that count last fell (None:
    no node has come back yet)."""

    began: datetime
    unheard: int | None = None
    fell_at: datetime | None = None


def returned(ret: Return, now: datetime) -> tuple[int, int, bool]:
    """Of the nodes Ready on record, how many have not been heard since
    the return began and how many there are, and whether it is over:
    RETURNED of them heard, none come back for a heartbeat interval (and
    QUIET_S), or RETURN_GRACES graces passed."""
    counts = Node.objects.filter(state=NodeState.READY).aggregate(
        unheard=Count("pk", filter=Q(last_heartbeat_at__lt=ret.began)),
        total=Count("pk"),
        longest=Max("heartbeat_interval_s"),
    )
    unheard, total = counts["unheard"], counts["total"]
    if not total:
        return 0, 0, True
    # Quiet counts from the last node to come back, and only once one has:
    # restarted processes busy starting (a cold read of the whole fleet
    # takes seconds at 5,000 nodes) hear no one at first, and that is not
    # a fleet that stopped coming back.
    before = total if ret.unheard is None else ret.unheard
    if unheard < before:
        ret.fell_at = now
    ret.unheard = min(unheard, before)
    wait_s = max(QUIET_S, counts["longest"])
    quiet = ret.fell_at is not None and (now - ret.fell_at).total_seconds() >= wait_s
    bounded = now - ret.began >= RETURN_GRACES * grace(counts["longest"])
    return unheard, total, quiet or bounded or total - unheard >= RETURNED * total
