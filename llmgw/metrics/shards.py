"""Each running shard's cores and resident memory, as its node's agent
measured them over its process group (seed daed835d88), and each model's
queue depth as the gateway measures it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmgw.inventory.models import Node
from llmgw.serving.models import Shard


class ShardCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        labels = ["node", "model", "shard"]
        cores = GaugeMetricFamily(
            "llmgw_shard_cpu_cores", "CPU cores a shard's process group uses", labels=labels
        )
        memory = GaugeMetricFamily(
            "llmgw_shard_memory_bytes", "Resident memory of a shard's process group", labels=labels
        )
        models = {
            f"r{replica}-{rank}": name
            for replica, rank, name in Shard.objects.values_list(
                "replica_id", "rank", "replica__model__name"
            )
        }
        cutoff = timezone.now() - timedelta(seconds=settings.MEASUREMENT_MAX_AGE_S)
        rows = Node.objects.filter(last_heartbeat_at__gte=cutoff, shard_samples__isnull=False)
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
        yield from (cores, memory)
