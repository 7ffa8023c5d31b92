"""What runs on one node, for its page: each replica with a shard here
(model, profile, GPUs, the cores and memory its agent measured beside what
it reserved, state, age and route), and each engine's share of that use.

Measured use is the agent's (Node.shard_samples, per shard's process
group, as /metrics exports it): null when the agent did not measure it or
its last heartbeat is too old to say, never 0.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from llmgw.inventory.models import Node
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Shard
from llmgw.units import GiB


def measured(node: Node, now: datetime) -> dict[str, dict[str, Any]]:
    """Shard id ("r12-0") -> its sample, while the node's heartbeat is fresh."""
    cutoff = now - timedelta(seconds=settings.MEASUREMENT_MAX_AGE_S)
    if node.last_heartbeat_at is None or node.last_heartbeat_at < cutoff:
        return {}
    return {
        s["id"]: s
        for s in node.shard_samples or []
        if isinstance(s, dict) and isinstance(s.get("id"), str)
    }


def route(shard: Shard, ranks: list[tuple[int, str]], node_ready: bool) -> str:
    """Where the gateway sends this replica's prompts, or why not."""
    fabric = shard.replica.fabric
    over = f" over {fabric}" if fabric else ""
    if shard.rank > 0:
        leader = next((name for rank, name in ranks if rank == 0), None)
        served = f", served through {leader}" if leader else ""
        return f"rank {shard.rank} of {len(ranks)}{over}{served}"
    spread = f" (rank 0 of {len(ranks)}{over})" if len(ranks) > 1 else ""
    if not shard.url:
        return f"not routed: not listening yet{spread}"
    if shard.replica.state != ReplicaState.READY:
        return f"not routed: replica {shard.replica.state}; {shard.url}{spread}"
    if not node_ready:
        return f"not routed: node NotReady; {shard.url}{spread}"
    return f"{shard.url}{spread}"


def replicas(node: Node, now: datetime, node_ready: bool) -> list[dict[str, Any]]:
    """One row a shard on the node, by model; two queries."""
    shards = list(
        Shard.objects.filter(node=node)
        .select_related("replica__model", "replica__profile")
        .defer("replica__explanation")
        .order_by("replica__model__name", "replica__created_at", "rank")
    )
    ranks: dict[int, list[tuple[int, str]]] = defaultdict(list)
    siblings = Shard.objects.filter(replica__in={s.replica_id for s in shards})
    for replica_id, rank, name in siblings.order_by("rank").values_list(
        "replica_id", "rank", "node__name"
    ):
        ranks[replica_id].append((rank, name))
    samples = measured(node, now)
    rows = []
    for s in shards:
        replica, profile = s.replica, s.replica.profile
        sample = samples.get(s.shard_id, {})
        rows.append(
            {
                "replica": replica.pk,
                "shard": s.shard_id,
                "model": replica.model.name,
                "profile": profile.name,
                "engine": profile.engine,
                "engine_version": profile.engine_version or None,
                "gpus": list(s.gpu_indices or []),
                "cpu_cores": sample.get("cpu_cores"),
                "memory_bytes": sample.get("memory_bytes"),
                "reserved_cores": profile.cpu_cores or None,
                # memory_gb is GiB, as everywhere (llmgw.units).
                "reserved_memory_bytes": int(profile.memory_gb * GiB)
                if profile.memory_gb
                else None,
                "state": s.state,
                "replica_state": replica.state,
                "message": s.message or None,
                "restarts": s.restarts,
                "created_at": replica.created_at.isoformat(),
                "age_s": round((now - replica.created_at).total_seconds(), 1),
                "route": route(s, ranks[replica.pk], node_ready),
            }
        )
    return rows


def _total(values: list[float | None]) -> float | None:
    """The sum, or None when any one is unknown: part of a sum is not the sum."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def engine_use(engines: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agent's engines, each with the shards that run on it and their
    measured cores and memory summed (null: some shard not measured). A
    profile naming no version runs on the first installed one of its name,
    as the agent picks it."""
    out = [dict(e) for e in engines if isinstance(e, dict)]
    for row in rows:
        matches = [
            e
            for e in out
            if e.get("name") == row["engine"]
            and (row["engine_version"] is None or e.get("version") == row["engine_version"])
        ]
        installed = [e for e in matches if e.get("status") == "installed"]
        if matches:
            (installed or matches)[0].setdefault("_rows", []).append(row)
    for e in out:
        mine = e.pop("_rows", [])
        e["shards"] = len(mine)
        e["cpu_cores"] = _total([r["cpu_cores"] for r in mine]) if mine else None
        e["memory_bytes"] = _total([r["memory_bytes"] for r in mine]) if mine else None
    return out
