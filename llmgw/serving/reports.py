"""What agents report of their shards, applied to the replicas."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from llmgw.inventory.models import Node
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica, Shard

PROGRESS = [ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.LOADING, ReplicaState.READY]
STATE_FIELDS = ("id", "state", "url", "pid", "restarts", "generation", "message")


def state_key(shards: list[dict[str, Any]]) -> list[list[Any]]:
    """What of a shard report changes a replica: not its cores or memory."""
    return [[s.get(k) for k in STATE_FIELDS] for s in shards]


def replica_state(states: list[str]) -> str:
    """A replica fails whole and is ready only whole."""
    if not states:
        return ReplicaState.PENDING
    if ReplicaState.FAILED in states:
        return ReplicaState.FAILED
    if ReplicaState.STOPPING in states:
        return ReplicaState.STOPPING
    return min(states, key=lambda s: PROGRESS.index(s) if s in PROGRESS else 0)


def store(node: Node, reports: list[dict[str, Any]], now: datetime | None = None) -> set[int]:
    """Update this node's shards from its report; returns replicas whose
    state changed. A shard the agent does not mention is pending (the agent
    has not picked it up yet)."""
    now = now or timezone.now()
    by_id = {r.get("id"): r for r in reports}
    changed: set[int] = set()
    for shard in Shard.objects.filter(node=node):
        report = by_id.get(shard.shard_id)
        fields: dict[str, Any] = {}
        if report is None:
            if shard.state != ReplicaState.PENDING:
                fields = {"state": ReplicaState.PENDING, "message": "not reported by the agent"}
        else:
            fields = {
                "state": report.get("state") or ReplicaState.PENDING,
                "url": report.get("url") or "",
                "pid": report.get("pid"),
                "restarts": report.get("restarts") or 0,
                "message": report.get("message") or "",
                "reported_at": now,
            }
        if fields:
            Shard.objects.filter(pk=shard.pk).update(**fields)
            changed.add(shard.replica_id)
    for replica in Replica.objects.filter(pk__in=changed).prefetch_related("shards"):
        state = replica_state([s.state for s in replica.shards.all()])
        if state != replica.state:
            Replica.objects.filter(pk=replica.pk).update(state=state, state_changed_at=now)
    return changed
