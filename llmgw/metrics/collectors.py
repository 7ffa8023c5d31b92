"""Prometheus series over the inventory.

Built from the database at scrape time, so every control-plane replica
exports the same fleet. A measurement older than MEASUREMENT_MAX_AGE_S is
left out rather than repeated: a stale number graphed as current is worse
than a gap, which Prometheus shows as one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet

from llmgw.inventory import services
from llmgw.inventory.models import Filesystem, Node
from llmgw.metrics.text import Family

# The columns the node series and services.is_ready read: a node's JSON
# columns (telemetry, ports, collectors) are left in the database.
_COLUMNS = (
    "name", "state", "last_heartbeat_at", "heartbeat_interval_s", "cordoned", "cpus",
    "memory_total_bytes", "filesystems_reported_at", "measured_at", "cpu_utilization_percent",
    "load1", "load5", "load15", "memory_used_bytes", "memory_available_bytes",
)  # fmt: skip


def _fresh(at: datetime | None, now: datetime) -> bool:
    return at is not None and now - at <= timedelta(seconds=settings.MEASUREMENT_MAX_AGE_S)


def families(scope: QuerySet[Node], now: datetime) -> list[Family]:
    """Each node's state, size, load and filesystems, for the nodes in `scope`."""
    up = Family("llmgw_node_up", "1 if the node is Ready, else 0", ["node"])
    cpus = Family("llmgw_node_cpus", "CPUs the node reported", ["node"])
    mem = Family("llmgw_node_memory_bytes", "MemTotal the node reported", ["node"])
    cordoned = Family("llmgw_node_cordoned", "1 if an operator cordoned the node", ["node"])
    util = Family("llmgw_node_cpu_utilization_percent", "CPU use across all cores", ["node"])
    load = Family("llmgw_node_load", "Load average", ["node", "window"])
    used = Family("llmgw_node_memory_used_bytes", "Memory in use", ["node"])
    avail = Family("llmgw_node_memory_available_bytes", "Memory available", ["node"])
    fs = ["node", "mount", "shared"]
    fs_free = Family("llmgw_node_filesystem_free_bytes", "Free bytes per filesystem", fs)
    fs_size = Family("llmgw_node_filesystem_size_bytes", "Size per filesystem", fs)

    fresh_fs: set[int] = set()
    for node in scope.only(*_COLUMNS).iterator(chunk_size=2000):
        name = node.name
        up.add_metric([name], 1.0 if services.is_ready(node, now) else 0.0)
        cordoned.add_metric([name], 1.0 if node.cordoned else 0.0)
        if node.cpus is not None:
            cpus.add_metric([name], node.cpus)
        if node.memory_total_bytes is not None:
            mem.add_metric([name], node.memory_total_bytes)
        if _fresh(node.filesystems_reported_at, now):
            fresh_fs.add(node.pk)
        if not _fresh(node.measured_at, now):
            continue
        if node.cpu_utilization_percent is not None:
            util.add_metric([name], node.cpu_utilization_percent)
        for window, value in (("1m", node.load1), ("5m", node.load5), ("15m", node.load15)):
            if value is not None:
                load.add_metric([name, window], value)
        if node.memory_used_bytes is not None:
            used.add_metric([name], node.memory_used_bytes)
        if node.memory_available_bytes is not None:
            avail.add_metric([name], node.memory_available_bytes)

    rows = Filesystem.objects.filter(node_id__in=fresh_fs).values_list(
        "node__name", "mount", "shared", "free_bytes", "total_bytes"
    )
    for node_name, mount, shared, free, total in rows.iterator(chunk_size=2000):
        labels = [node_name, mount, "true" if shared else "false"]
        fs_free.add_metric(labels, free)
        fs_size.add_metric(labels, total)
    return [up, cordoned, cpus, mem, util, load, used, avail, fs_free, fs_size]
