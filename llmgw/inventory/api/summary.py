"""The fleet in a few numbers, counted by the database: `ctl status` and
the console read these instead of fetching every node to add them up.

Unknown is not zero: a node that did not say its CPUs is counted apart
(`cpus_unknown`), and a sum over no known value is null.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum

from llmgw.inventory.api.filters import ready_q
from llmgw.inventory.models import Gpu, ModelHolding, Node


def summary(nodes: QuerySet[Node], now: datetime) -> dict[str, Any]:
    counts = nodes.order_by().aggregate(
        nodes=Count("pk"),
        ready=Count("pk", filter=ready_q(now)),
        cordoned=Count("pk", filter=Q(cordoned=True)),
        cpus_known=Sum("cpus"),
        cpus_unknown=Count("pk", filter=Q(cpus__isnull=True)),
        memory_known=Sum("memory_total_bytes"),
        memory_unknown=Count("pk", filter=Q(memory_total_bytes__isnull=True)),
    )
    # Named apart from the columns they sum (Django refuses an aggregate
    # that shadows a field), then named as the node list names them.
    counts["cpus"] = counts.pop("cpus_known")
    counts["memory_total_bytes"] = counts.pop("memory_known")
    counts["not_ready"] = counts["nodes"] - counts["ready"]
    # A card on a silent node is counted apart: it may be gone with its
    # node, and a fleet total that still holds it overstates what can run.
    ready = Q(node__in=Node.objects.filter(ready_q(now)).order_by().values("pk"))
    gpus = (
        Gpu.objects.filter(node__in=nodes.order_by().values("pk"))
        .order_by("gpu_class")
        .values("gpu_class")
        .annotate(
            count=Count("pk"),
            ready=Count("pk", filter=ready),
            unhealthy=Count("pk", filter=~Q(unhealthy_reason="")),
            nodes=Count("node", distinct=True),
        )
    )
    weights = (
        ModelHolding.objects.filter(node__in=nodes.order_by().values("pk"))
        .order_by("model_name")
        .values("model_name")
        .annotate(nodes=Count("node", distinct=True))
    )
    return {
        **counts,
        "gpus": [
            {**g, "gpu_class": g["gpu_class"] or None, "not_ready": g["count"] - g["ready"]}
            for g in gpus
        ],
        "weights": [{"model": w["model_name"], "nodes": w["nodes"]} for w in weights],
    }
