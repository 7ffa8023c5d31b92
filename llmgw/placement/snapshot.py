"""The inventory as the scheduler sees it: plain views built from a handful
of queries, whatever the fleet's size."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from llmgw import holdings
from llmgw.catalog.models import Profile as ProfileRow
from llmgw.database import rows
from llmgw.fabrics.models import Port
from llmgw.facility.services import Facility, declared_by_node
from llmgw.inventory import services as inventory
from llmgw.inventory.cards import CardView
from llmgw.inventory.models import Gpu, ModelHolding, Node
from llmgw.nvlink import domains
from llmgw.placement.fabric_maps import FabricRef, PortFacts, map_indexes, map_view
from llmgw.placement.types import GpuView, NodeView, Profile, gib_bytes


def profile_view(row: ProfileRow) -> Profile:
    return Profile(
        name=row.name,
        priority=row.priority,
        gpu_class=row.gpu_class or None,
        gpus_per_shard=row.gpus_per_shard,
        tensor_parallel=row.tensor_parallel,
        nodes_per_replica=row.nodes_per_replica,
        min_memory_gb=row.min_memory_gb,
        memory_gb=row.memory_gb,
        cpu_cores=row.cpu_cores,
        engine=row.engine,
        engine_version=row.engine_version or None,
        node_selector=dict(row.node_selector or {}),
        fabric=row.fabric or None,
        power_w=row.power_w,
        keep_within=row.keep_within or None,
    )


def kept_view(stored: ProfileRow) -> Profile:
    """profile_view, made once per stored instance: placement's catalog
    hands out the same instances while their rows are the same, and the
    rule table works out what it needs of a view once per view
    (placement.verdicts.kind), which a view made afresh on every placement
    had to do again (a tenth of a millisecond of CPU)."""
    hit = _views.get(id(stored))
    if hit is not None and hit[0] is stored:
        return hit[1]
    if len(_views) >= 1024:
        _views.clear()
    view = profile_view(stored)
    _views[id(stored)] = (stored, view)
    return view


# id(stored profile) -> the instance (kept, so that its id is not reused) and its view.
_views: dict[int, tuple[ProfileRow, Profile]] = {}


@dataclass
class Claims:
    """What each node (by pk) owes its shards, and what it runs."""

    memory: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    cores: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    # Node -> model name -> its shards there.
    models: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))


def claims_by_node(only: Collection[int] | None = None) -> Claims:
    """Memory and cores each node owes its shards, read from the catalog's
    declared figures (seed 8fd4c1392d): what a profile asked for is not
    something a running process reports, and it survives a restart. And how
    many shards of each model each runs: one that claims nothing still uses
    the node, and replicas of one model spread over nodes.

    Counted per profile and converted per shard as the scheduler converts
    them, so a fractional memory_gb adds up to the same bytes either way.
    Serving stores the shards and answers (llmgw/holdings.py): placement
    may not import it, nor walk its relations."""
    claims = Claims()
    for r in holdings.reader().shard_counts(only):
        claims.memory[r.node] += r.shards * gib_bytes(r.memory_gb or 0)
        claims.cores[r.node] += r.shards * (r.cpu_cores or 0)
        claims.models[r.node][r.model] = claims.models[r.node].get(r.model, 0) + r.shards
    return claims


def nvlink_islands(
    topology: dict[str, Any] | None, uuids: dict[str, int]
) -> tuple[frozenset[int], ...]:
    """Groups of a node's GPUs joined by NVLink, from its topology matrix
    (cells "NV<n>"); empty when the node did not say."""
    if not topology or not topology.get("matrix"):
        return ()
    order = tuple(uuids.get(u) for u in topology.get("gpus") or [])
    # The matrix as reported (cells are text or null: the agent protocol's
    # Telemetry) keys the cache, copied in C: judging each cell before the
    # cache was looked up cost 72 ms of every whole read of 5,000 nodes (22 now).
    return _islands(tuple(map(tuple, topology["matrix"])), order)


# A fleet's nodes share a handful of matrices, and a whole read joins
# each node's again: the same answer for the same matrix and card order.
@lru_cache(maxsize=4096)
def _islands(
    cells: tuple[tuple[str | None, ...], ...], order: tuple[int | None, ...]
) -> tuple[frozenset[int], ...]:
    linked = tuple(tuple(isinstance(c, str) and c.startswith("NV") for c in row) for row in cells)
    parent = {i: i for i in order if i is not None}

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for a, row in enumerate(linked[: len(order)]):
        for b, nv in enumerate(row[: len(order)]):
            ia, ib = order[a], order[b]
            if nv and ia is not None and ib is not None:
                parent[root(ia)] = root(ib)
    groups: dict[int, set[int]] = defaultdict(set)
    for i in parent:
        groups[root(i)].add(i)
    return tuple(frozenset(g) for g in sorted(groups.values(), key=min))


def engine_view(engines: list[dict[str, Any]] | None) -> tuple[frozenset[str], dict[str, str]]:
    """Installed engines as the scheduler names them, and the node's own
    words about each engine that is not (yet) installed, by name."""
    installed: set[str] = set()
    status: dict[str, str] = {}
    for e in engines or []:
        if e.get("status") == "installed":
            # A build the agent installed is that version and no other; only
            # an engine reported without a version (agent.yaml names it) is
            # of unknown version, which the rules accept for any pin.
            installed.add(f"{e['name']}@{e['version']}" if e.get("version") else e["name"])
        elif e.get("name") not in status:
            status[e.get("name", "")] = f"{e.get('status')}: {e.get('message') or ''}".strip()
    return frozenset(installed), status


def unverified(devices: list[str], why: str) -> str:
    are = "is" if len(devices) == 1 else "are"
    return f"cannot say which physical fabric {', '.join(sorted(set(devices)))} {are} on: {why}"


def unverified_why(port: Port | PortFacts) -> str:
    # The two ways an active port has no physical fabric (fabrics.services).
    if port.link_layer == "Ethernet":
        return "it has no RoCE v2 address"
    return "no subnet manager answered"


def port_facts(only: Collection[int] | None) -> list[PortFacts]:
    """Every node's ports (or only these nodes'), in each node's order."""
    found = rows.values("placed ports", _ports, "node_id", only)
    return [
        PortFacts._make((*r[:-1], FabricRef(r[-1]) if r[-2] is not None else None)) for r in found
    ]


def _ports() -> QuerySet[Port]:
    return Port.objects.order_by("node_id", "device", "port").values_list(
        *PortFacts._fields[:-1], "physical_fabric__identity"
    )


def fabric_view(
    node: Node, ports: list[Port] | list[PortFacts]
) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """The node's fabrics as placement divides them: each declared name split
    by physical fabric ("ib-a@0x..."), so a replica forms on one part only.

    A node whose adapters for one name sit on two fabrics is refused for it,
    and so is one that cannot say which fabric they are on (no subnet manager
    answered, or no heartbeat has reported its ports): two such nodes may sit
    on two fabrics, and a replica across them hangs at its first collective.
    Only multi-node replicas read this; single-node placement ignores it."""
    declared = {f["name"]: tuple(f.get("adapters") or ()) for f in node.fabrics or []}
    if node.active_fabrics is None:
        why = "no heartbeat has reported its ports yet"
        return {}, {name: unverified(list(a), why) for name, a in declared.items() if a}
    views: dict[str, tuple[str, ...]] = {}
    problems: dict[str, str] = {}
    for name in node.active_fabrics:
        active = [p for p in ports if p.declared_fabric == name and p.active]
        parts: dict[str, list[str]] = defaultdict(list)
        unknown: dict[str, list[str]] = defaultdict(list)
        for p in active:
            if p.physical_fabric is not None:
                parts[p.physical_fabric.identity].append(p.device)
            else:
                unknown[unverified_why(p)].append(p.device)
        if len(parts) > 1:
            where = "; ".join(f"{', '.join(sorted(v))} on {k}" for k, v in sorted(parts.items()))
            problems[name] = f"its adapters for {name} sit on {len(parts)} fabrics ({where})"
        elif parts:
            # Its unverified adapters are left out: the replica uses the others.
            ((identity, devices),) = parts.items()
            views[f"{name}@{identity}"] = tuple(sorted(set(devices)))
        elif unknown:
            problems[name] = "; ".join(unverified(d, why) for why, d in sorted(unknown.items()))
    return views, problems


class PlacedCard(NamedTuple):
    """What placement reads of a card: its health and NVLink domain as
    stored with its report, without its wear (four JSON columns a card,
    decoded for every card of the fleet on each whole read: the largest
    part of it at 5,000 nodes). Read as a CardView reads."""

    node_id: int
    # Shadows tuple.index, as the column is named (mypy: an int, not the method).
    index: int  # type: ignore[assignment]
    uuid: str
    gpu_class: str
    memory_total_bytes: int | None
    unhealthy_reason: str
    missing: bool
    nvlink_domain: str | None
    nvlink_problem: str

    @property
    def healthy(self) -> bool:
        return not self.unhealthy_reason


def placed_cards(only: Collection[int] | None) -> dict[int, list[PlacedCard]]:
    """Every node's cards (or only these nodes'), by node pk, in index order."""
    out: dict[int, list[PlacedCard]] = defaultdict(list)
    for row in rows.values("placed cards", _cards, "node_id", only):
        out[row[0]].append(PlacedCard(*row))
    return out


def _cards() -> QuerySet[Gpu]:
    return Gpu.objects.order_by("node_id", "index").values_list(*PlacedCard._fields)


def gpu_view(card: CardView | PlacedCard, claimed: set[int], limits: dict[int, float]) -> GpuView:
    return GpuView(
        index=card.index,
        uuid=card.uuid,
        gpu_class=card.gpu_class,
        memory_bytes=card.memory_total_bytes,
        healthy=card.healthy,
        unhealthy_reason=card.unhealthy_reason,
        allocated=card.index in claimed,
        power_limit_w=limits.get(card.index),
    )


# The node columns a view is made of: the one list of them. A node is
# loaded with these alone (the desired state alone averages 33 KB a GPU
# node: a whole read of 5,000 decoded it for seconds), and every one is
# logged by the triggers the warm fleet follows (serving migrations 0006,
# 0007), but for FOLLOWED_OTHERWISE: tests/serving/test_change_log_covers_reads.py
# holds the two to each other.
NODE_READS = (
    "id", "name", "state", "cordoned", "cordon_reason", "operator_labels", "agent_labels",
    "cpus", "memory_total_bytes", "engines", "engines_probed", "fabrics", "active_fabrics",
    "gpu_topology", "imex", "heartbeat_interval_s", "last_heartbeat_at", "gpu_telemetry",
    "sensors",
)  # fmt: skip
# Read but not logged, and why a warm copy stays true without it.
FOLLOWED_OTHERWISE = {
    "inventory_node.last_heartbeat_at": "readiness: the warm fleet keeps each node's "
    "deadline and looks the heartbeat up when it passes",
    "inventory_node.gpu_telemetry": "measured power and GPU power limits, which change "
    "with every reading (logged, every process would read 500 nodes a second at 5,000): "
    "read again on a timer for nodes in a capped domain, the only ones whose placement "
    "they move, and read under lock by the database's check of each decision there "
    "(serving.checked), so a stale reading never takes a domain past its cap",
    "inventory_node.sensors": "measured power, as gpu_telemetry",
    "facility_hold.held_at": "shown, not weighed",
    "facility_hold.held_by": "shown, not weighed",
    "facility_hold.moving": "the drain's own bookkeeping, not weighed",
    "facility_hold.progress": "the drain's own bookkeeping, not weighed",
    "facility_hold.progress_at": "the drain's own bookkeeping, not weighed",
    "fabrics_fabricmap.taken_at": "changes only with the map, whose analysis is logged",
    "catalog_model.name": "a model's name is its key: renamed, it is another model",
    "fabrics_port.port": "orders a node's ports, not weighed",
    "inventory_hearing.since": "when the control plane could hear again, which only ever "
    "moves readiness deadlines later: the warm fleet looks each node up at its deadline",
    "inventory_hearing.heard_at": "as inventory_hearing.since",
}


def read_nodes(only: Collection[int] | None) -> list[Node]:
    """Every node (or only these), by name, loaded with NODE_READS alone:
    Node.objects.only(*NODE_READS), composed once for these columns."""
    # In the model's order, the order Node.from_db takes values in.
    columns = tuple(f.attname for f in Node._meta.concrete_fields if f.attname in NODE_READS)
    found = rows.values(
        ("placed nodes", columns), lambda: Node.objects.values_list(*columns), "id", only
    )
    return [Node.from_db(connection.alias, columns, row) for row in found]


def _held() -> QuerySet[ModelHolding]:
    return ModelHolding.objects.order_by().values_list("node_id", "model_name")


def node_views(only: Collection[int] | None = None) -> list[NodeView]:
    """Every node's view, or only these nodes' (by pk): what a warm copy of
    the fleet reads again when the database says they changed."""
    return [view for _, view in pk_views(only)]


def views_by_pk(pks: Collection[int]) -> dict[int, NodeView | None]:
    """These nodes' views as stored now, by pk; None for a node gone."""
    fresh = dict(pk_views(pks))
    return {pk: fresh.get(pk) for pk in pks}


def pk_views(only: Collection[int] | None = None) -> list[tuple[int, NodeView]]:
    """Each node's pk and view, in node order."""
    now = timezone.now()
    claims = claims_by_node(only)
    claimed = defaultdict(set)
    for node_id, index in holdings.reader().claimed_gpus(only):
        claimed[node_id].add(index)
    nodes = read_nodes(only)
    cards = placed_cards(only)
    holds = defaultdict(set)
    for node_id, name in rows.values("held weights", _held, "node_id", only):
        holds[node_id].add(name)
    ports: dict[int, list[PortFacts]] = defaultdict(list)
    for port in port_facts(only):
        ports[port.node_id].append(port)
    maps = map_indexes()
    facility = Facility()
    declared = declared_by_node(only)
    views: list[tuple[int, NodeView]] = []
    for n in nodes:
        where = facility.for_node(n)
        fabrics, fabric_problems = fabric_view(n, ports[n.pk])
        leaves, degraded = map_view(n, ports[n.pk], fabrics, maps) if maps else ({}, frozenset())
        engines, engine_status = engine_view(n.engines)
        uuids = {c.uuid: c.index for c in cards[n.pk]}
        domain, problem = domains.placement_domain(
            {"name": n.name, "imex": n.imex, "gpus": cards[n.pk]}
        )
        views.append(
            (
                n.pk,
                NodeView(
                    name=n.name,
                    state=inventory.effective_state(n, now),
                    cordoned=n.cordoned,
                    cordon_reason=n.cordon_reason,
                    labels=n.labels,
                    cpus=n.cpus,
                    memory_total_bytes=n.memory_total_bytes,
                    claimed_memory_bytes=claims.memory.get(n.pk, 0),
                    claimed_cores=claims.cores.get(n.pk, 0),
                    models=claims.models.get(n.pk, {}),
                    gpus=tuple(gpu_view(c, claimed[n.pk], where.gpu_limits) for c in cards[n.pk]),
                    fabrics=fabrics,
                    fabric_problems=fabric_problems,
                    fabric_leaves=leaves,
                    degraded_fabrics=degraded,
                    holds_weights=frozenset(holds[n.pk]),
                    nvlink_islands=nvlink_islands(n.gpu_topology, uuids),
                    nvlink_domain=domain,
                    nvlink_problem=problem,
                    engines=engines,
                    # None (an agent too old to say) is not refused for engines.
                    engines_probed=bool(n.engines_probed),
                    engine_status=engine_status,
                    held=where.held,
                    declared_w=declared.get(n.pk),
                    derived_w=where.derived_w,
                    measured_w=where.measured_w,
                    budgets=where.budgets,
                ),
            )
        )
    return views
