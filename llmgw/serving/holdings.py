"""Serving's answers to what the nodes hold (llmgw/holdings.py), for the
apps below it that may not read its tables themselves."""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import Count, QuerySet

from llmgw.database import rows
from llmgw.holdings import ReplicaShard, ShardCount
from llmgw.serving.models import GpuClaim, Replica, Shard


class Holdings:
    # Read for a node each time the warm fleet reads it again: composed once
    # (llmgw.database.rows.values).

    def declared_watts(self, nodes: Collection[int] | None) -> dict[int, float]:
        out: dict[int, float] = {}
        for node, watts, count in rows.values("declared watts", _declared, "node_id", nodes):
            out[node] = out.get(node, 0.0) + count * watts
        return out

    def profiles_in_use(self, models: Collection[str]) -> dict[str, dict[str, int]]:
        found = (
            Replica.objects.filter(model__name__in=list(models))
            .values("model__name", "profile__name")
            .annotate(n=Count("id"))
        )
        used: dict[str, dict[str, int]] = {}
        for r in found:
            used.setdefault(r["model__name"], {})[r["profile__name"]] = r["n"]
        return used

    def shard_counts(self, nodes: Collection[int] | None) -> list[ShardCount]:
        return [ShardCount(*r) for r in rows.values("shard counts", _counts, "node_id", nodes)]

    def claimed_gpus(self, nodes: Collection[int] | None) -> list[tuple[int, int]]:
        return rows.values("claimed gpus", _claimed, "node_id", nodes)

    def replica_shards(self, nodes: Collection[int] | None) -> list[ReplicaShard]:
        shards = Shard.objects.all()
        if nodes is not None:
            shards = shards.filter(node_id__in=list(nodes))
        found = shards.order_by("replica_id", "rank").values_list(
            "node_id", "replica_id", "replica__model__name", "replica__state", "gpu_indices"
        )
        return [
            ReplicaShard(node, replica, model, state, tuple(gpus or ()))
            for node, replica, model, state, gpus in found
        ]


def _declared() -> QuerySet[Shard]:
    return (
        Shard.objects.filter(replica__profile__power_w__isnull=False)
        .values_list("node_id", "replica__profile__power_w")
        .annotate(count=Count("id"))
    )


def _counts() -> QuerySet[Shard]:
    return Shard.objects.values_list(
        "node_id", "replica__model__name", "replica__profile__memory_gb",
        "replica__profile__cpu_cores",
    ).annotate(count=Count("id"))  # fmt: skip


def _claimed() -> QuerySet[GpuClaim]:
    return GpuClaim.objects.order_by().values_list("node_id", "index")
