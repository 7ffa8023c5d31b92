"""Console pages. No domain logic: they read the same services and
serializers the API uses, so a page never says something the API does not.
Pages that change while open render a shell and let their script fetch the
API (the same JSON the page then refreshes from)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from llmgw.accounts import roles
from llmgw.accounts.decorators import viewer_required
from llmgw.catalog.models import Model
from llmgw.console import cluster as cluster_table
from llmgw.fabrics import overview
from llmgw.inventory.api.summary import summary
from llmgw.inventory.models import Node
from llmgw.serving.held import summary as held_summary


@viewer_required
def cluster(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    nodes = cluster_table.table(request.GET, now)
    fabrics = overview.build()
    return render(
        request,
        "cluster.html",
        {
            "table": nodes,
            "summary": summary(Node.objects.all(), now),
            "gpu_classes": cluster_table.gpu_classes(),
            **fabrics,
            "page": "cluster",
        },
        status=400 if nodes.error else 200,
    )


@viewer_required
def node(request: HttpRequest, name: str) -> HttpResponse:
    get_object_or_404(Node, name=name)
    # A viewer is sent no control it cannot use (the API would answer 403).
    can_operate = roles.is_operator(request.user)
    return render(request, "node.html", {"name": name, "page": "node", "can_operate": can_operate})


@viewer_required
def held(request: HttpRequest) -> HttpResponse:
    models = (
        Model.objects.prefetch_related("replicas")
        .select_related("held_state", "last_placement")
        .defer("last_placement__explanation")
        .order_by("name")
    )
    rows = [
        {
            "name": m.name,
            "always_running": m.always_running,
            "under_load": m.under_load,
            "held": held_summary(m),
        }
        for m in models
    ]
    # A viewer is sent no control it cannot use (the API would answer 403).
    context = {"models": rows, "page": "held", "can_operate": roles.is_operator(request.user)}
    return render(request, "held.html", context)


@viewer_required
def gpus(request: HttpRequest) -> HttpResponse:
    return render(request, "gpus.html", {"page": "gpus"})


@viewer_required
def fabrics(request: HttpRequest) -> HttpResponse:
    return render(request, "fabrics.html", {"page": "fabrics"})


@viewer_required
def nvlink(request: HttpRequest) -> HttpResponse:
    return render(request, "nvlink.html", {"page": "nvlink"})
