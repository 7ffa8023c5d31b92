"""The timings every scenario reasons with, and the invariants each ends on
(tests/reliability/cluster.py's census).

Agents heartbeat every 10 s, so a node's grace is 30 s; the staleness
check runs every 5 s and the reconciler every 10 s. Timings are measured
on a shared machine: the bounds asserted carry a margin."""

from __future__ import annotations

import time

from tests.reliability.cluster import Cluster
from tests.reliability.conftest import NODES

GRACE_S, STALENESS_EVERY_S, RECONCILE_EVERY_S = 30.0, 5.0, 10.0
# Every agent's heartbeat interval here: a node killed was last heard up
# to one interval before its death, and its grace runs from then.
INTERVAL_S = 10.0
# Scheduling and a loaded machine: what a bound may overrun by.
MARGIN_S = 20.0


def spurious(cluster: Cluster, before: set[str]) -> set[str]:
    """Nodes marked NotReady since `before` was read."""
    return set(cluster.marked_not_ready()) - before


def settled_after_grace(cluster: Cluster) -> dict[str, int]:
    """Let a node's full grace and two staleness passes go by, so a node
    wrongly taken for silent would be marked, then check every invariant."""
    time.sleep(GRACE_S + 2 * STALENESS_EVERY_S)
    cluster.settle(NODES, 120)
    return cluster.census()
