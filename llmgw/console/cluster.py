"""The cluster page's node table at fleet scale: a page of nodes at a time,
searched, filtered and grouped by the database, never the whole fleet
rendered at once (5,000 rows took seconds to first paint).

The query string is the state of the table, so a filtered view is a link:
`?search=&state=&class=&rack=&group=rack&page=N`. Filters are the node
API's own (llmgw.inventory.api.filters), so the page and `/api/v1/nodes`
pick the same nodes for the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, F, Max, Q
from django.http import QueryDict
from django.utils import timezone

from llmgw.inventory.api import filters
from llmgw.inventory.api.node_list import node_rows
from llmgw.inventory.models import Gpu, Node
from llmgw.locations import TREE as LEVELS
from llmgw.locations import label
from llmgw.serving.models import Shard

PAGE_SIZE = 100
# Models named in a row's "Runs" cell; the rest are counted, all in its title.
RUNS_SHOWN = 2
RACK = label("rack")
# What the table shows of each node.
FIELDS = [
    "name",
    "state",
    "simulated",
    "cordoned",
    "cordon_reason",
    "measurements_fresh",
    "cpu_utilization_percent",
    "memory_total_bytes",
    "memory_available_bytes",
    "cpus",
    "disk_local",
    "disk_shared",
    "gpu_classes",
    "labels",
    "engines",
    "warnings",
]
PAGE_PARAMS = ("search", "state", "class", "rack", "group", "page")


@dataclass
class Table:
    """One page of the node table and what its controls show."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    total: int = 0
    page: int = 1
    pages: int = 1
    chosen: dict[str, str] = field(default_factory=dict)
    error: str = ""
    racks: list[str] = field(default_factory=list)
    links: dict[str, str | None] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)
    states: tuple[str, ...] = tuple(filters.STATES.values())


def _query(params: QueryDict) -> tuple[filters.NodeQuery, dict[str, str], int]:
    """The API's query for the page's controls; BadParameter names the one."""
    unknown = sorted(set(params) - set(PAGE_PARAMS))
    if unknown:
        raise filters.BadParameter(
            unknown[0], "unknown parameter; known: " + ", ".join(PAGE_PARAMS)
        )
    chosen = {k: params.get(k, "").strip() for k in PAGE_PARAMS}
    api = QueryDict(mutable=True)
    for key in ("search", "state", "class"):
        if chosen[key]:
            api[key] = chosen[key]
    if chosen["rack"]:
        api["domain"] = f"rack={chosen['rack']}"
    if chosen["group"] not in ("", "rack"):
        raise filters.BadParameter("group", f"rack or nothing, not {chosen['group']!r}")
    page = filters.whole_number("page", chosen["page"], 1, 10**6) if chosen["page"] else 1
    return filters.parse(api, FIELDS), chosen, page


def _with_location(row: dict[str, Any]) -> dict[str, Any]:
    labels = row.get("labels") or {}
    location = {label(level) for level in (*LEVELS, "pdu")}
    # Only the levels the labels name: "-/hall1/..." read as a site called "-".
    known = [(level, v) for level in LEVELS if (v := labels.get(label(level)))]
    row["location"] = "/".join(v for _, v in known)
    row["location_title"] = " · ".join(
        f"{level} {dict(known).get(level) or 'unknown'}" for level in LEVELS
    )
    row["pdu"] = labels.get(label("pdu")) or ""
    row["rack"] = labels.get(RACK) or ""
    row["other_labels"] = {k: v for k, v in labels.items() if k not in location}
    row["gpu_text"] = ", ".join(
        f"{n}× {cls or '-'}" for cls, n in sorted((row.get("gpu_classes") or {}).items())
    )
    return row


def runs(names: list[str]) -> dict[str, list[tuple[str, int]]]:
    """Each named node's models, with how many of their replicas have a
    shard on it: one query for a page of rows, never one a row."""
    out: dict[str, list[tuple[str, int]]] = {}
    rows = (
        Shard.objects.filter(node__name__in=names)
        .values_list("node__name", "replica__model__name")
        .annotate(replicas=Count("replica", distinct=True))
        .order_by("node__name", "replica__model__name")
    )
    for node, model, replicas in rows:
        out.setdefault(node, []).append((model, replicas))
    return out


def _with_runs(rows: list[dict[str, Any]]) -> None:
    found = runs([r["name"] for r in rows])
    for row in rows:
        models = [f"{m} ×{n}" if n > 1 else m for m, n in found.get(row["name"], [])]
        row["runs"] = ", ".join(models[:RUNS_SHOWN])
        row["runs_more"] = len(models) - RUNS_SHOWN if len(models) > RUNS_SHOWN else 0
        row["runs_title"] = ", ".join(models)


def _link(chosen: dict[str, str], page: int | None) -> str | None:
    if page is None:
        return None
    kept = {k: v for k, v in chosen.items() if v and k != "page"}
    return "?" + urlencode({**kept, **({"page": page} if page > 1 else {})})


def racks() -> list[str]:
    values = (
        Node.objects.annotate(rack=filters.label_value(RACK))
        .filter(rack__isnull=False)
        .order_by("rack")
        .values_list("rack", flat=True)
        .distinct()
    )
    return list(values)


def table(params: QueryDict, now: datetime) -> Table:
    out = Table(total=Node.objects.count(), racks=racks())
    try:
        query, out.chosen, out.page = _query(params)
    except filters.BadParameter as exc:
        out.error, out.chosen = str(exc), {k: params.get(k, "") for k in PAGE_PARAMS}
        return out
    nodes = filters.filtered(Node.objects.all(), query, now)
    grouped = out.chosen["group"] == "rack"
    if grouped:
        # Racks in order, a node with no rack label last, then by name.
        nodes = nodes.annotate(rack=filters.label_value(RACK)).order_by(
            F("rack").asc(nulls_last=True), "name"
        )
    out.count = nodes.count()
    out.pages = max(1, -(-out.count // PAGE_SIZE))
    out.page = min(out.page, out.pages)
    start = (out.page - 1) * PAGE_SIZE
    out.rows = [_with_location(r) for r in node_rows(nodes, FIELDS, start, start + PAGE_SIZE, now)]
    _with_runs(out.rows)
    out.links = {
        "previous": _link(out.chosen, out.page - 1 if out.page > 1 else None),
        "next": _link(out.chosen, out.page + 1 if out.page < out.pages else None),
    }
    if grouped:
        out.groups = _rack_groups(out.rows, nodes, now)
    return out


def _rack_groups(rows: list[dict[str, Any]], nodes: Any, now: datetime) -> list[dict[str, Any]]:
    """The page's rows under their racks, each with the whole rack's counts
    among the nodes the filters pick (a rack may run over two pages)."""
    on_page = {r["rack"] or None for r in rows}
    counts = {
        c["rack"]: c
        for c in nodes.filter(Q(rack__in=[r for r in on_page if r]) | Q(rack__isnull=True))
        .order_by()
        .values("rack")
        .annotate(nodes=Count("pk"), ready=Count("pk", filter=filters.ready_q(now)))
    }
    groups: list[dict[str, Any]] = []
    for row in rows:
        if not groups or groups[-1]["rack"] != row["rack"]:
            c = counts.get(row["rack"] or None, {})
            groups.append(
                {"rack": row["rack"], "nodes": c.get("nodes"), "ready": c.get("ready"), "rows": []}
            )
        groups[-1]["rows"].append(row)
    return groups


def gpu_classes() -> list[dict[str, Any]]:
    """Cards per class, counted by the database: the fleet's GPUs are tens
    of thousands of rows, and the table has one line a class."""
    # Cards on NotReady nodes are counted apart, as the fleet's summary does.
    ready = Q(node__in=Node.objects.filter(filters.ready_q(timezone.now())).values("pk"))
    rows = (
        Gpu.objects.order_by("gpu_class")
        .values("gpu_class")
        .annotate(
            count=Count("pk"),
            ready=Count("pk", filter=ready),
            unhealthy=Count("pk", filter=~Q(unhealthy_reason="")),
            nodes=Count("node", distinct=True),
            memory=Max("memory_total_bytes"),
        )
    )
    return [
        {
            **r,
            "gpu_class": r["gpu_class"] or "-",
            "healthy": r["count"] - r["unhealthy"],
            "not_ready": r["count"] - r["ready"],
        }
        for r in rows
    ]
