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

Power caps span nodes, so a log row for the decision's own nodes does not
see a claim another process made next door: the same statement locks the
caps (facility_budget rows) of every domain the decision's nodes are in,
and a second statement, whose snapshot is taken after those locks were
granted, sums each domain's draw as placement.power judges it, from the
stored shards and the latest readings, and the decision stands only
within every cap. Two processes placing in one capped domain take its
row in turn, so the second counts the first's committed shards. Only a
decision in a capped domain pays that second statement.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import NamedTuple

from django.utils import timezone

from llmgw.database import prepared
from llmgw.placement import power
from llmgw.serving.followed import unseen

# followed.unseen, with the look's snapshot as this module's statements name it.
UNSEEN = unseen("%(xmax)s", "%(xip)s")

# The log rows the look did not see, read once through the index on xid
# (a condition per node joined with OR made it a scan of the whole log);
# and the caps of the decision's nodes' domains, locked for POWER.
CHECK = f"""
WITH unseen AS MATERIALIZED (
    SELECT node_id FROM serving_nodechange
    WHERE kind = 'node' AND {UNSEEN}
      AND xid <> pg_current_xact_id()
), capped AS MATERIALIZED (
    SELECT b.domain FROM facility_budget b
    WHERE b.domain IN (SELECT unnest(domain_keys) FROM inventory_node WHERE id = ANY(%(nodes)s))
    ORDER BY b.domain
    FOR NO KEY UPDATE OF b
)
SELECT n.id,
       n.state, n.last_heartbeat_at, n.heartbeat_interval_s,
       n.memory_total_bytes, n.cpus,
       COALESCE(claimed.memory, 0), COALESCE(claimed.cores, 0),
       EXISTS (SELECT 1 FROM unseen u WHERE u.node_id = n.id OR u.node_id IS NULL),
       ARRAY(SELECT domain FROM capped)
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


# Which nodes are in a domain is read for the nodes the look had there
# and every node changed since (a label moves a node, a name is logged):
# a node in it now is one or the other. Reading the whole fleet's
# instead cost 10 ms at 5,000 nodes, every placement in a capped domain.
# Each node's row says which domains it is in (facility migration 0003).
# An index on them was tried and left out: every heartbeat that cannot
# update its row in place adds to such an index's pending list, which
# every search reads (one bench-fleet run with it: 17 ms of PostgreSQL a
# placement at 5,000 nodes).
#
# A node's three figures (facility.power, placement.power): declared by
# its stored shards' profiles, derived from its cards' power limits,
# measured as its cards' draw and its CPU packages' (the last two kept on
# its row by PostgreSQL, as its domains); NULL where nothing says. Each
# domain: its cap, its draw (each node's largest figure, with
# what this transaction's shards add: `watts` to what is declared and
# measured, `undeclared` the part of it no profile declares, which the
# stored shards do not count), and its nodes. And whether a hold or a cap
# changed since the look (a whole-fleet row): the caps read here would
# not be the ones the decision was made under.
POWER = f"""
WITH candidates AS (
    SELECT unnest(%(members)s::bigint[]) AS id
    UNION
    SELECT node_id FROM serving_nodechange
    WHERE kind = 'node' AND node_id IS NOT NULL
      -- Stable, where pg_current_xact_id() is volatile: an index cannot
      -- take a volatile value, and the arm made the read a scan of the log.
      AND ({UNSEEN} OR xid = pg_current_xact_id_if_assigned())
), added AS (
    SELECT * FROM unnest(%(added)s::bigint[], %(watts)s::float8[], %(undeclared)s::float8[])
        AS a(node_id, watts, undeclared)
), members AS MATERIALIZED (
    SELECT b.domain, b.watts AS cap, n.id, n.derived_w AS derived, n.measured_w AS measured
    FROM facility_budget b
    -- Through the index on id: a join with the candidates planned generically
    -- took the log's rows since the look for a third of it, and read every node.
    JOIN inventory_node n
        ON n.id = ANY(ARRAY(SELECT id FROM candidates)) AND b.domain = ANY(n.domain_keys)
    WHERE b.domain = ANY(%(domains)s)
), declared AS (
    -- From the profiles that declare watts to their shards: a sum for
    -- each node through its shards was 65 ms of a hall of 5,000.
    SELECT s.node_id, sum(p.power_w) AS declared
    FROM catalog_profile p
    JOIN serving_replica r ON r.profile_id = p.id
    JOIN serving_shard s ON s.replica_id = r.id
    WHERE p.power_w IS NOT NULL
    GROUP BY s.node_id
), figures AS (
    SELECT m.domain, m.cap, m.id, a.watts AS added, a.undeclared, d.declared,
           m.derived, m.measured
    FROM members m
    LEFT JOIN added a ON a.node_id = m.id
    LEFT JOIN declared d ON d.node_id = m.id
), draws AS (
    SELECT domain, cap, id,
           GREATEST(
               CASE WHEN declared IS NULL AND COALESCE(undeclared, 0) = 0 THEN NULL
                    ELSE COALESCE(declared, 0) + COALESCE(undeclared, 0) END,
               derived,
               measured + COALESCE(added, 0)
           ) AS draw
    FROM figures
)
SELECT domain, cap, COALESCE(sum(draw), 0), count(*) FILTER (WHERE draw IS NULL),
       array_agg(id),
       EXISTS (SELECT 1 FROM serving_nodechange
               WHERE kind = 'node' AND node_id IS NULL
                 AND {UNSEEN}
                 AND xid <> pg_current_xact_id())
FROM draws
GROUP BY domain, cap
ORDER BY domain
"""


class Want(NamedTuple):
    """What this transaction's decisions claim on one node."""

    memory: int = 0
    cores: int = 0
    # Watts their shards add (placement.power.shard_watts), and the part
    # of them no profile declares (drawn from the cards' limits).
    watts: float = 0.0
    undeclared: float = 0.0

    def plus(self, memory: int, cores: int, watts: float, undeclared: float) -> Want:
        return Want(
            self.memory + memory,
            self.cores + cores,
            self.watts + watts,
            self.undeclared + undeclared,
        )


class Changed(Exception):
    """The decision's nodes changed since the look it was made after."""

    def __init__(self, nodes: set[int], why: list[str]) -> None:
        super().__init__("; ".join(why))
        self.nodes = nodes
        self.why = why


def check(
    wants: dict[int, Want],
    names: dict[int, str],
    xmax: str,
    xip: Collection[str],
    deadline: Callable[[str, datetime | None, int, datetime], datetime | None],
    in_domains: Callable[[list[str]], set[int]],
) -> None:
    """Raise Changed unless every node in `wants` (node pk -> what this
    transaction's decisions claim there) is as the look at (`xmax`, `xip`)
    saw it, and every capped domain they are in stays within its cap.
    `deadline(state, last_heartbeat_at, interval, now)`: the readiness rule
    the index follows (None: not Ready). `in_domains(keys)`: the nodes
    the look had in these domains."""
    now: datetime = timezone.now()
    with prepared.cursor() as cursor:
        cursor.execute(CHECK, {"xmax": xmax, "xip": list(xip), "nodes": list(wants)})
        rows = cursor.fetchall()
    changed: set[int] = set(wants) - {r[0] for r in rows}
    why = [f"{names.get(pk, pk)} is gone" for pk in sorted(changed)]
    domains: list[str] = []
    for pk, state, at, every, total, cpus, memory, cores, logged, capped in rows:
        domains = capped
        name = names.get(pk, str(pk))
        want = wants[pk]
        if logged:
            why.append(f"{name} changed since placement looked")
        elif deadline(state, at, every, now) is None:
            why.append(f"{name} is no longer Ready")
        elif want.memory and total is not None and memory > total:
            why.append(f"{name} would be over-committed: {memory} bytes claimed of {total}")
        elif want.cores and cpus is not None and cores > cpus:
            why.append(f"{name} would be over-committed: {cores} cores claimed of {cpus}")
        else:
            continue
        changed.add(pk)
    if not changed and domains:
        changed = _within_caps(wants, domains, in_domains(domains), xmax, xip, why)
    if changed:
        raise Changed(changed, why)


# Sums of floats in another order than the scheduler's: a draw this
# close to its cap is the scheduler's to judge.
SLACK_W = 0.001


def _within_caps(
    wants: dict[int, Want],
    domains: list[str],
    members: set[int],
    xmax: str,
    xip: Collection[str],
    why: list[str],
) -> set[int]:
    """The nodes of each capped domain the decisions take past its cap
    (all read again: their draws are what was misjudged), said in `why`.
    `members`: the nodes the look had in them."""
    added = [pk for pk, want in wants.items() if want.watts]
    params = {
        # As the text of an array: psycopg writes a list element by element
        # in Python, 2.7 ms for the 5,000 nodes of a hall, every placement there.
        "members": "{" + ",".join(map(str, sorted(members | set(wants)))) + "}",
        "added": added,
        "watts": [wants[pk].watts for pk in added],
        "undeclared": [wants[pk].undeclared for pk in added],
        "domains": domains,
        "xmax": xmax,
        "xip": list(xip),
    }
    with prepared.cursor() as cursor:
        cursor.execute(POWER, params)
        rows = cursor.fetchall()
    changed: set[int] = set()
    for domain, cap, draw, unknown, members, whole in rows:
        if whole:
            why.append("the facility's holds or caps changed since placement looked")
            changed |= set(wants)
        elif draw > cap + SLACK_W:
            nodes = f", {unknown} of its nodes of unknown draw" if unknown else ""
            why.append(
                f"{power.domain_name(domain)} would draw {draw / 1000:.1f} kW "
                f"of its {cap / 1000:.1f} kW cap{nodes}"
            )
            changed |= set(members)
    return changed
