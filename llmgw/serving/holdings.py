"""Serving's answers to what the nodes hold (llmgw/holdings.py), for the
apps below it that may not read its tables themselves."""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import Count

from llmgw.holdings import ReplicaShard, ShardCount
from llmgw.serving.models import GpuClaim, Replica, Shard


class Holdings:
    def declared_watts(self, nodes: Collection[int] | None) -> dict[int, float]:
        shards = Shard.objects.filter(replica__profile__power_w__isnull=False)
        if nodes is not None:
            shards = shards.filter(node_id__in=list(nodes))
        rows = shards.values("node_id", "replica__profile__power_w").annotate(count=Count("id"))
        out: dict[int, float] = {}
        for r in rows:
            watts = r["count"] * r["replica__profile__power_w"]
            out[r["node_id"]] = out.get(r["node_id"], 0.0) + watts
        return out

    def profiles_in_use(self, models: Collection[str]) -> dict[str, dict[str, int]]:
        rows = (
            Replica.objects.filter(model__name__in=list(models))
            .values("model__name", "profile__name")
            .annotate(n=Count("id"))
        )
        used: dict[str, dict[str, int]] = {}
        for r in rows:
            used.setdefault(r["model__name"], {})[r["profile__name"]] = r["n"]
        return used

    def shard_counts(self, nodes: Collection[int] | None) -> list[ShardCount]:
        shards = (
            Shard.objects.all() if nodes is None else Shard.objects.filter(node_id__in=list(nodes))
        )
        rows = shards.values_list(
            "node_id",
            "replica__model__name",
            "replica__profile__memory_gb",
            "replica__profile__cpu_cores",
        ).annotate(count=Count("id"))
        return [ShardCount(*row) for row in rows]

    def claimed_gpus(self, nodes: Collection[int] | None) -> list[tuple[int, int]]:
        claims = GpuClaim.objects.all()
        if nodes is not None:
            claims = claims.filter(node_id__in=list(nodes))
        return list(claims.values_list("node_id", "index"))

    def replica_shards(self, nodes: Collection[int] | None) -> list[ReplicaShard]:
        shards = Shard.objects.all()
        if nodes is not None:
            shards = shards.filter(node_id__in=list(nodes))
        rows = shards.order_by("replica_id", "rank").values_list(
            "node_id", "replica_id", "replica__model__name", "replica__state", "gpu_indices"
        )
        return [
            ReplicaShard(node, replica, model, state, tuple(gpus or ()))
            for node, replica, model, state, gpus in rows
        ]
