"""Each running shard's cores and resident memory, as its node's agent
measured them over its process group (seed daed835d88), and each model's
queue depth as the gateway measures it."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet

from llmgw.inventory.models import Node
from llmgw.metrics.text import Family
from llmgw.serving.models import Shard


def families(scope: QuerySet[Node], now: datetime) -> list[Family]:
    labels = ["node", "model", "shard"]
    cores = Family("llmgw_shard_cpu_cores", "CPU cores a shard's process group uses", labels)
    memory = Family(
        "llmgw_shard_memory_bytes", "Resident memory of a shard's process group", labels
    )
    models = {
        f"r{replica}-{rank}": name
        for replica, rank, name in Shard.objects.filter(node__in=scope).values_list(
            "replica_id", "rank", "replica__model__name"
        )
    }
    cutoff = now - timedelta(seconds=settings.MEASUREMENT_MAX_AGE_S)
    rows = scope.filter(last_heartbeat_at__gte=cutoff, shard_samples__isnull=False)
    for node, samples in rows.values_list("name", "shard_samples"):
        for s in samples or []:
            model = models.get(s.get("id"))
            if model is None:
                continue  # a shard being stopped, no longer the catalog's
            key = [node, model, s["id"]]
            if s.get("cpu_cores") is not None:
                cores.add_metric(key, s["cpu_cores"])
            if s.get("memory_bytes") is not None:
                memory.add_metric(key, s["memory_bytes"])
    return [cores, memory]
