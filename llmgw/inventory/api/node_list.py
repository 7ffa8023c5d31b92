"""A page of the node list, built for a fleet of thousands.

NodeSerializer writes every row, so the list and a single node cannot
say different things; what changes is what it is handed. Only the columns
the asked-for fields read are loaded (a node row also carries port
samples, telemetry and desired state: large JSON no list shows). Disk
totals and cards per class are summed by the database for the whole page
in one query each. And when no field needs a node's related rows, each
node is a plain row of values rather than a model instance, which is most
of the cost of a page of a thousand.
"""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.db.models import Count, Prefetch, QuerySet, Sum

from llmgw.inventory.api.serializers import FilesystemSerializer, GpuSerializer, NodeSerializer
from llmgw.inventory.models import Filesystem, Gpu, Node

# Fields that need the related rows themselves, and how they are loaded
# (the columns shown; a card's wear JSON is not).
NESTED = {
    "filesystems": Prefetch(
        "filesystems", Filesystem.objects.only("node_id", *FilesystemSerializer.Meta.fields)
    ),
    "gpus": Prefetch(
        "gpus",
        Gpu.objects.only(
            "node_id",
            "unhealthy_reason",
            *(f for f in GpuSerializer.Meta.fields if f not in ("healthy", "unhealthy_reason")),
        ),
    ),
    "holdings": "holdings",
}
# What each computed field reads, when not a column of its own name.
COLUMNS = {
    "state": ("state", "last_heartbeat_at", "heartbeat_interval_s"),
    "labels": ("agent_labels", "operator_labels"),
    "measurements_fresh": ("measured_at",),
    "disk_local": (),
    "disk_shared": (),
    "gpu_classes": (),
}


def _disks(page: QuerySet[Node]) -> dict[tuple[int, bool], dict[str, int]]:
    rows = (
        Filesystem.objects.filter(node__in=page.values("pk"))
        .order_by()
        .values_list("node_id", "shared")
        .annotate(free=Sum("free_bytes"), total=Sum("total_bytes"))
    )
    return {(n, shared): {"free_bytes": f, "total_bytes": t} for n, shared, f, t in rows}


def _gpu_classes(page: QuerySet[Node]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    rows = (
        Gpu.objects.filter(node__in=page.values("pk"))
        .order_by()
        .values_list("node_id", "gpu_class")
        .annotate(n=Count("pk"))
    )
    for node_id, cls, n in rows:
        out.setdefault(node_id, {})[cls] = n
    return out


def _plain(page: QuerySet[Node], columns: set[str]) -> list[SimpleNamespace]:
    """Rows as attributes, with the labels the model's property would give."""
    rows = []
    for values in page.values(*columns):
        row = SimpleNamespace(pk=values["id"], **values)
        row.labels = {**(values.get("agent_labels") or {}), **(values.get("operator_labels") or {})}
        rows.append(row)
    return rows


def node_rows(
    nodes: QuerySet[Node], fields: list[str] | None, start: int, end: int, now: datetime
) -> list[dict[str, Any]]:
    """Nodes [start:end] (by name) as the API shows them."""
    wanted = fields or list(NodeSerializer.Meta.fields)
    names = {f.name for f in Node._meta.concrete_fields}
    columns = {"id", "name"}
    for name in wanted:
        columns.update(COLUMNS.get(name, (name,) if name in names else ()))
    nested = [NESTED[n] for n in wanted if n in NESTED]
    page = nodes.only(*columns)[start:end]
    context: dict[str, Any] = {"now": now}
    # Summed by the database, unless the rows are loaded anyway.
    if ("disk_local" in wanted or "disk_shared" in wanted) and "filesystems" not in wanted:
        context["disks"] = _disks(page)
    if "gpu_classes" in wanted and "gpus" not in wanted:
        context["gpu_classes"] = _gpu_classes(page)
    if nested:
        rows = page.prefetch_related(*nested)
        return list(NodeSerializer(rows, many=True, context=context, fields=fields).data)
    return NodeSerializer(context=context, fields=fields).plain_rows(_plain(page, columns))
