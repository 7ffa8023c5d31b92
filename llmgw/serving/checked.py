"""The database's last word on a placement made from a process's warm
index: before the transaction that stores it commits, the nodes it claims
on are read again, locked, and the decision stands only if nothing it was
made on has changed since the look it was made after.

What "changed" means is the log the triggers write (warm.py): a row for
one of the decision's nodes (or for the whole fleet) from a transaction
that had not committed at the look, other than this one. The clock is
checked too (a node whose heartbeat lapsed since is no longer Ready), and
memory and cores are counted again from the stored shards, this
decision's included: a backstop like the unique GPU claim, so that two
processes that both slipped past the advisory lock still cannot
over-commit a node between them. The rows are locked first (the nodes'
desired state, rewritten just before, already holds them), so a
transaction that changed them has committed before this read's snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime

from django.utils import timezone

from llmgw.database import prepared

# The log rows the look did not see, read once through the index on xid
# (a condition per node joined with OR made it a scan of the whole log).
CHECK = """
WITH unseen AS MATERIALIZED (
    SELECT node_id FROM serving_nodechange
    WHERE kind = 'node' AND (xid >= %(xmax)s::xid8 OR xid = ANY(%(xip)s::xid8[]))
      AND xid <> pg_current_xact_id()
)
SELECT n.id,
       n.state, n.last_heartbeat_at, n.heartbeat_interval_s,
       n.memory_total_bytes, n.cpus,
       COALESCE(claimed.memory, 0), COALESCE(claimed.cores, 0),
       EXISTS (SELECT 1 FROM unseen u WHERE u.node_id = n.id OR u.node_id IS NULL)
FROM inventory_node n
LEFT JOIN LATERAL (
    -- As the snapshot counts claims: a profile's declared figures, per shard.
    SELECT sum(floor(p.memory_gb * 1073741824))::bigint AS memory, sum(p.cpu_cores) AS cores
    FROM serving_shard s
    JOIN serving_replica r ON r.id = s.replica_id
    JOIN catalog_profile p ON p.id = r.profile_id
    WHERE s.node_id = n.id
) AS claimed ON true
WHERE n.id = ANY(%(nodes)s)
ORDER BY n.name
FOR NO KEY UPDATE OF n
"""


class Changed(Exception):
    """The decision's nodes changed since the look it was made after."""

    def __init__(self, nodes: set[int], why: list[str]) -> None:
        super().__init__("; ".join(why))
        self.nodes = nodes
        self.why = why


def check(
    wants: dict[int, tuple[int, int]],
    names: dict[int, str],
    xmax: str,
    xip: Collection[str],
    deadline: Callable[[str, datetime | None, int, datetime], datetime | None],
) -> None:
    """Raise Changed unless every node in `wants` (node pk -> the memory
    and cores this transaction's decisions claim there) is as the look at
    (`xmax`, `xip`) saw it. `deadline(state, last_heartbeat_at, interval,
    now)`: the readiness rule the index follows (None: not Ready)."""
    now: datetime = timezone.now()
    with prepared.cursor() as cursor:
        cursor.execute(CHECK, {"xmax": xmax, "xip": list(xip), "nodes": list(wants)})
        rows = cursor.fetchall()
    changed: set[int] = set(wants) - {r[0] for r in rows}
    why = [f"{names.get(pk, pk)} is gone" for pk in sorted(changed)]
    for pk, state, at, every, total, cpus, memory, cores, logged in rows:
        name = names.get(pk, str(pk))
        want_mem, want_cores = wants[pk]
        if logged:
            why.append(f"{name} changed since placement looked")
        elif deadline(state, at, every, now) is None:
            why.append(f"{name} is no longer Ready")
        elif want_mem and total is not None and memory > total:
            why.append(f"{name} would be over-committed: {memory} bytes claimed of {total}")
        elif want_cores and cpus is not None and cores > cpus:
            why.append(f"{name} would be over-committed: {cores} cores claimed of {cpus}")
        else:
            continue
        changed.add(pk)
    if changed:
        raise Changed(changed, why)
