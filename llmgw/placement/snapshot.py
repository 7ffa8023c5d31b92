"""The inventory as the scheduler sees it: plain views built from a handful
of queries, whatever the fleet's size."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Sum
from django.utils import timezone

from llmgw.catalog.models import Profile as ProfileRow
from llmgw.inventory import services as inventory
from llmgw.inventory.models import Gpu, ModelHolding, Node
from llmgw.placement.types import GB, GpuView, NodeView, Profile
from llmgw.serving.models import GpuClaim, Shard


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
    )


def claims_by_node() -> tuple[dict[int, int], dict[int, int]]:
    """Memory and cores each node owes its shards, read from the catalog's
    declared figures (seed 8fd4c1392d): what a profile asked for is not
    something a running process reports, and it survives a restart."""
    rows = Shard.objects.values("node_id").annotate(
        memory=Sum("replica__profile__memory_gb"), cores=Sum("replica__profile__cpu_cores")
    )
    memory = {r["node_id"]: int((r["memory"] or 0) * GB) for r in rows}
    cores = {r["node_id"]: int(r["cores"] or 0) for r in rows}
    return memory, cores


def node_views() -> list[NodeView]:
    now = timezone.now()
    memory, cores = claims_by_node()
    claimed = defaultdict(set)
    for node_id, index in GpuClaim.objects.values_list("node_id", "index"):
        claimed[node_id].add(index)
    gpus = defaultdict(list)
    for g in Gpu.objects.all():
        gpus[g.node_id].append(
            GpuView(
                index=g.index,
                uuid=g.uuid,
                gpu_class=g.gpu_class,
                memory_bytes=g.memory_total_bytes,
                healthy=g.healthy,
                unhealthy_reason=g.unhealthy_reason,
                allocated=g.index in claimed[g.node_id],
            )
        )
    holds = defaultdict(set)
    for node_id, name in ModelHolding.objects.values_list("node_id", "model_name"):
        holds[node_id].add(name)
    views = []
    for n in Node.objects.all():
        views.append(
            NodeView(
                name=n.name,
                state=inventory.effective_state(n, now),
                cordoned=n.cordoned,
                cordon_reason=n.cordon_reason,
                labels=n.labels,
                cpus=n.cpus,
                memory_total_bytes=n.memory_total_bytes,
                claimed_memory_bytes=memory.get(n.pk, 0),
                claimed_cores=cores.get(n.pk, 0),
                gpus=tuple(sorted(gpus[n.pk], key=lambda g: g.index)),
                fabrics={f["name"]: tuple(f.get("adapters") or ()) for f in n.fabrics or []},
                holds_weights=frozenset(holds[n.pk]),
            )
        )
    return views
