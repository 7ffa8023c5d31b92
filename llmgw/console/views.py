"""Console pages. No domain logic: they read the same services and
serializers the API uses, so a page never says something the API does not.
Pages that change while open render a shell and let their script fetch the
API (the same JSON the page then refreshes from)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from llmgw.accounts.decorators import viewer_required
from llmgw.catalog.models import Model
from llmgw.fabrics import overview
from llmgw.inventory.api.serializers import NodeSerializer
from llmgw.inventory.models import Gpu, Node


def _gpu_classes() -> list[dict[str, Any]]:
    classes: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"count": 0, "healthy": 0, "nodes": set(), "memory": None}
    )
    for g in Gpu.objects.select_related("node"):
        row = classes[g.gpu_class or "-"]
        row["count"] += 1
        row["healthy"] += 1 if g.healthy else 0
        row["nodes"].add(g.node.name)
        row["memory"] = g.memory_total_bytes if row["memory"] is None else row["memory"]
    return [
        {"gpu_class": k, **v, "nodes": len(v["nodes"]), "unhealthy": v["count"] - v["healthy"]}
        for k, v in sorted(classes.items())
    ]


@viewer_required
def cluster(request: HttpRequest) -> HttpResponse:
    nodes = Node.objects.prefetch_related("filesystems", "gpus", "holdings")
    rows = NodeSerializer(nodes, many=True, context={"now": timezone.now()}).data
    fabrics = overview.build()
    return render(
        request,
        "cluster.html",
        {"nodes": rows, "gpu_classes": _gpu_classes(), **fabrics, "page": "cluster"},
    )


@viewer_required
def node(request: HttpRequest, name: str) -> HttpResponse:
    get_object_or_404(Node, name=name)
    return render(request, "node.html", {"name": name, "page": "node"})


@viewer_required
def held(request: HttpRequest) -> HttpResponse:
    models = Model.objects.prefetch_related("replicas").order_by("name")
    rows = [
        {
            "name": m.name,
            "always_running": m.always_running,
            "under_load": m.under_load,
            "replicas": len(m.replicas.all()),
            "held": bool(m.always_running or m.under_load),
        }
        for m in models
    ]
    return render(request, "held.html", {"models": rows, "page": "held"})


@viewer_required
def gpus(request: HttpRequest) -> HttpResponse:
    return render(request, "gpus.html", {"page": "gpus"})


@viewer_required
def fabrics(request: HttpRequest) -> HttpResponse:
    return render(request, "fabrics.html", {"page": "fabrics"})


@viewer_required
def nvlink(request: HttpRequest) -> HttpResponse:
    return render(request, "nvlink.html", {"page": "nvlink"})
