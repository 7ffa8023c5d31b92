"""The one freshness rule for what placement keeps between transactions.

A process keeps the fleet as placement sees it (warm.py) and the engine
catalog it writes into nodes' desired state (desired.py). Both are kept
until the change log says otherwise: PostgreSQL's triggers write a row to
serving_nodechange for every change either reads (migrations 0006 to
0009), each row with its transaction's id and a kind saying which copy it
concerns. A reader notes the snapshot it last checked at and takes every
row of its kind at or above that snapshot's xmax or in progress then, so a
transaction that commits after a younger one is still seen; rows are
pruned KEEP_S after they are old, so a reader that has not checked for
IDLE_S reads whole again.

READERS names each copy, its kind, and the read that fills it: what it
reads is what its triggers must log, and
tests/serving/test_change_log_covers_reads.py fails on a column a reader
reads that no trigger of its kind logs. Read but not logged, by design:
snapshot.FOLLOWED_OTHERWISE, each with why (measured power among them:
it changes with every heartbeat, so it is read again on a timer, and the
database's check of each decision, checked.py, reads it under lock).

Not a copy, so not here: the model and profile rows placing.py converts
once per change of their content (it compares the rows it reads, under
its lock, in every placement) and what checked.py reads under lock.
"""

from __future__ import annotations

import time
from typing import NamedTuple

# The log is pruned of rows older than the mark set at least KEEP_S ago
# (every transaction below that mark had finished when it was set); a
# reader that has not checked for IDLE_S (well under KEEP_S) reads whole
# instead of trusting a log that may have lost its rows.
KEEP_S = 600
IDLE_S = 300

NODE = "node"
ENGINE = "engine"


class Reader(NamedTuple):
    kind: str
    what: str
    # "module:function": the read that fills the copy (a test runs it).
    read: str
    # "module:name" of a dict, column -> why: read, not logged, followed otherwise.
    otherwise: str = ""


READERS = (
    Reader(
        NODE,
        "each process's warm fleet (serving.warm): the node views placement decides on, "
        "holds, caps and fabric maps included",
        "llmgw.placement.snapshot:node_views",
        "llmgw.placement.snapshot:FOLLOWED_OTHERWISE",
    ),
    Reader(
        ENGINE,
        "the engine catalog written into each node's desired state (serving.desired)",
        "llmgw.serving.desired:read_engines",
    ),
)


# The last value an xid8 can take: the top of "at or above the xmax".
XID8_LAST = "18446744073709551615"


def unseen(xmax: str, xip: str, column: str = "xid") -> str:
    """SQL: the log row's transaction had not committed at a snapshot, whose
    xmax and in-progress transactions are the parameters marked `xmax` and
    `xip` ("%s" or "%(name)s").

    Written as a range with both ends rather than `xid >= xmax`: placement
    runs its statements on generic plans (serving.placing), where the
    planner cannot see the xmax. It guesses a third of the log for an open
    range, and scanned the whole log on every look and every check once
    the log was large; for a range with a known top it guesses a small
    fraction, and reads the index. The migration that sets xid's
    n_distinct (0013) keeps the other arms small too."""
    return (
        f"({column} BETWEEN {xmax}::xid8 AND '{XID8_LAST}'::xid8 OR {column} = ANY({xip}::xid8[]))"
    )


def since(kind: str) -> str:
    """SQL: whether a row of the kind was logged by a transaction that had
    not committed at the reader's snapshot (other than this one); its
    parameters are Cursor.params(). The kind is written into the text,
    not passed: on the generic plan placement's statements run on, a kind
    the planner cannot see made it scan the whole log for a rare one."""
    assert kind.isidentifier(), kind
    return f"""
EXISTS (SELECT 1 FROM serving_nodechange
        WHERE kind = '{kind}' AND {unseen("%s", "%s")}
          AND xid IS DISTINCT FROM pg_current_xact_id_if_assigned())
"""


def own(kind: str) -> str:
    """SQL: whether this transaction logged a row of the kind itself: what
    it reads then is its own, not yet anyone else's, and is not kept."""
    assert kind.isidentifier(), kind
    return f"""
EXISTS (SELECT 1 FROM serving_nodechange
        WHERE kind = '{kind}' AND xid = pg_current_xact_id_if_assigned())
"""


SNAPSHOT = "pg_current_snapshot()::text, pg_current_xact_id_if_assigned()::text"


class Cursor:
    """Where one reader is in the log: the snapshot of its last check."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.reset()

    def reset(self) -> None:
        self.xmax: str | None = None
        self.xip: list[str] = []
        self.checked_at = 0.0

    @property
    def fresh(self) -> bool:
        """Checked once, and recently enough that no row it has yet to
        read can have been pruned: else the copy is read whole."""
        return self.xmax is not None and time.monotonic() - self.checked_at < IDLE_S

    def params(self) -> list[object]:
        """since()'s parameters."""
        return [self.xmax or "0", self.xip]

    def moved(self, snapshot: str, own: str | None) -> None:
        """Checked at `snapshot` (SNAPSHOT's two values): the next check
        reads from there. This transaction's own rows are not committed
        at it, whatever the snapshot says of them."""
        _, self.xmax, xip = snapshot.split(":")
        self.xip = xip.split(",") if xip else []
        if own is not None:
            self.xip.append(own)
        self.checked_at = time.monotonic()
