"""JSON the console's scripts read beside /api/v1: what a page draws that the
operator API does not carry (a node's telemetry, engines and ports, every
card's wear, port counters for the fabric map) and the PromQL proxy.

Read-only and session-only. The columns are named one by one: a node row
also holds credential and join-token hashes, and no page may show them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import httpx
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views.decorators.http import require_GET

from llmgw.accounts import roles
from llmgw.console import node_work
from llmgw.fabrics.models import Port
from llmgw.inventory import gpu_health, services
from llmgw.inventory.api.serializers import NodeSerializer
from llmgw.inventory.cards import card_views
from llmgw.inventory.models import Node

# Counters that count traffic, not trouble: every other non-zero counter is shown.
TRAFFIC = {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"}
EXTRA_NODE_FIELDS = (
    "engines",
    "engines_probed",
    "sensors",
    "gpu_telemetry",
    "telemetry_at",
    "gpu_topology",
    "imex",
    "warnings",
    "notices",
    "ports_at",
    "active_fabrics",
)
GPU_WEAR_FIELDS = (
    "pci_bus_id",
    "numa_node",
    "nearest_adapter",
    "nearest_adapter_level",
    "missing",
    "xids",
    "remapped_rows",
    "pcie_replays",
    "nvlink_errors",
    "fabric",
)


def session_json(view: Callable[..., JsonResponse]) -> Callable[..., JsonResponse]:
    """login_required for scripts: a 401 they can show, not a login page they
    cannot parse; then the viewer role, as for the pages."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        if not request.user.is_authenticated:
            return JsonResponse({"detail": "log in first"}, status=401)
        if not roles.is_viewer(request.user):
            return JsonResponse(
                {"detail": "needs the viewer role (or operator, admin)"}, status=403
            )
        return view(request, *args, **kwargs)

    only_get: Callable[..., JsonResponse] = require_GET(wrapped)
    return only_get


def _port_rows(node: Node) -> list[dict[str, Any]]:
    """Each port as last sampled, with the physical fabric it was found on."""
    fabric_of = {
        (p.device, p.port): p.physical_fabric.identity if p.physical_fabric else None
        for p in Port.objects.filter(node=node).select_related("physical_fabric")
    }
    rows = []
    for s in node.port_samples or []:
        counters = s.get("counters") or {}
        rows.append(
            {
                **{k: s.get(k) for k in ("device", "port", "link_layer", "state", "phys_state")},
                **{k: s.get(k) for k in ("rate_gbps", "rate_text", "fabric")},
                "physical_fabric": fabric_of.get((s.get("device"), s.get("port"))),
                "errors": {k: v for k, v in counters.items() if k not in TRAFFIC and v},
                "xmit_bytes": counters.get("port_xmit_data"),
                "rcv_bytes": counters.get("port_rcv_data"),
            }
        )
    return rows


def _gpu_rows(node: Node) -> list[dict[str, Any]]:
    """The node's cards, from the gpus it was loaded with."""
    samples = {s.get("index"): s for s in node.gpu_telemetry or [] if isinstance(s, dict)}
    return [
        {
            "index": c.index,
            "uuid": c.uuid,
            "name": c.name,
            "gpu_class": c.gpu_class,
            "memory_total_bytes": c.memory_total_bytes,
            "ecc_uncorrected": c.ecc_uncorrected,
            "healthy": c.healthy,
            "unhealthy_reason": c.unhealthy_reason,
            **{k: getattr(c, k) for k in GPU_WEAR_FIELDS},
            # Worked out in one place for the node page and the GPU map alike.
            "wear": gpu_health.wear(c),
            "domain": c.nvlink_domain,
            "nvlink_problem": c.nvlink_problem,
            "sample": samples.get(c.index),
        }
        for c in card_views([node], node.gpus.all())[node.pk]
    ]


@session_json
def node_detail(request: HttpRequest, name: str) -> JsonResponse:
    node = get_object_or_404(
        Node.objects.prefetch_related("filesystems", "gpus", "holdings"), name=name
    )
    now = timezone.now()
    data = dict(NodeSerializer(node, context={"now": now}).data)
    data.update({k: getattr(node, k) for k in EXTRA_NODE_FIELDS})
    data["replicas"] = node_work.replicas(node, now, data["state"] == "Ready")
    data["engines"] = node_work.engine_use(node.engines or [], data["replicas"])
    data["gpus"] = _gpu_rows(node)
    data["ports"] = _port_rows(node)
    data["prometheus"] = bool(settings.PROMETHEUS_URL)
    return JsonResponse(data)


@session_json
def fleet_gpus(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    nodes = []
    for node in Node.objects.prefetch_related("gpus"):
        if node.gpus.all():
            state = services.effective_state(node, now)
            nodes.append({"name": node.name, "state": state, "gpus": _gpu_rows(node)})
    return JsonResponse({"nodes": nodes})


@session_json
def port_counters(request: HttpRequest) -> JsonResponse:
    """Every node's ports with their data counters and when they were read;
    the fabric map turns two of these into bytes per second."""
    out = []
    for name, samples, at in Node.objects.exclude(port_samples=None).values_list(
        "name", "port_samples", "ports_at"
    ):
        for s in samples or []:
            c = s.get("counters") or {}
            out.append(
                {
                    "node": name,
                    "device": s.get("device"),
                    "port": s.get("port"),
                    "state": s.get("state"),
                    "phys_state": s.get("phys_state"),
                    "rate_gbps": s.get("rate_gbps"),
                    "xmit_bytes": c.get("port_xmit_data"),
                    "rcv_bytes": c.get("port_rcv_data"),
                    "at": at.timestamp() if at else None,
                }
            )
    return JsonResponse({"ports": out})


@session_json
def promql(request: HttpRequest) -> JsonResponse:
    """An hour (at most a day) of one PromQL expression, as query_range.
    Only GET and only query_range: the console never writes to Prometheus."""
    if not settings.PROMETHEUS_URL:
        return JsonResponse({"configured": False, "detail": "LLMGW_PROMETHEUS_URL is not set"})
    query = request.GET.get("query", "")
    if not query or len(query) > 2000:
        return JsonResponse({"detail": "query: 1 to 2000 characters"}, status=400)
    try:
        seconds = min(86400, max(60, int(request.GET.get("seconds", "3600"))))
    except ValueError:
        return JsonResponse({"detail": "seconds: a whole number"}, status=400)
    end = timezone.now().timestamp()
    params = {"query": query, "start": end - seconds, "end": end, "step": max(5, seconds // 240)}
    try:
        r = httpx.get(
            settings.PROMETHEUS_URL.rstrip("/") + "/api/v1/query_range", params=params, timeout=10
        )
        body = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        return JsonResponse({"configured": True, "detail": f"Prometheus: {exc}"}, status=502)
    return JsonResponse({"configured": True, **body}, status=200 if r.is_success else 502)
