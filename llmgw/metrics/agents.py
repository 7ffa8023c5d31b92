"""What each node's agent said about itself: when it last reported, and how
each of its collectors fared (node_exporter's scrape_collector_success and
_duration_seconds, per node).

A node that never sent a `collectors` section has no collector series, and
one whose last heartbeat is older than MEASUREMENT_MAX_AGE_S loses them too:
a collector that succeeded an hour ago says nothing about it now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet

from llmgw.inventory.models import Node
from llmgw.metrics.text import Family


def families(scope: QuerySet[Node], now: datetime) -> list[Family]:
    heartbeat = Family(
        "llmgw_node_last_heartbeat_timestamp_seconds",
        "Unix time of the node's last heartbeat (age: time() minus this)",
        labels=["node"],
    )
    success = Family(
        "llmgw_node_collector_success",
        "1 if the agent's collector succeeded in its last heartbeat, else 0",
        labels=["node", "collector"],
    )
    duration = Family(
        "llmgw_node_collector_duration_seconds",
        "How long the agent's collector took in its last heartbeat",
        labels=["node", "collector"],
    )
    cutoff = now - timedelta(seconds=settings.MEASUREMENT_MAX_AGE_S)
    rows = scope.filter(last_heartbeat_at__isnull=False).values_list(
        "name", "last_heartbeat_at", "collectors"
    )
    for name, at, collectors in rows.iterator(chunk_size=2000):
        heartbeat.add_metric([name], at.timestamp())
        if at < cutoff:
            continue
        for c in collectors or []:
            labels = [name, c["name"]]
            success.add_metric(labels, 1.0 if c.get("ok") else 0.0)
            if c.get("seconds") is not None:
                duration.add_metric(labels, c["seconds"])
    return [heartbeat, success, duration]
