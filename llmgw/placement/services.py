"""The thin service around the pure scheduler: load a snapshot, decide,
store the result, all inside one transaction.

Two workers placing at once must never hand out one GPU, gigabyte or core
twice. On PostgreSQL a transaction-scoped advisory lock serialises
placement (decisions take milliseconds, so one at a time costs nothing),
and the unique (node, index) constraint on GPU claims refuses a double
hand-out even if a path ever bypasses the lock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from llmgw.catalog.models import Model
from llmgw.inventory.models import Node
from llmgw.placement import scheduler
from llmgw.placement.snapshot import leaf_name, node_views, profile_view
from llmgw.placement.types import Decision, Placement
from llmgw.serving import desired
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import GpuClaim, PlacementRecord, Replica, Shard

_LOCK_KEY = 0x6C6C6D67  # "llmg"


class PlacementError(Exception):
    pass


def _lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def _model(name: str) -> Model:
    try:
        return Model.objects.prefetch_related("profiles").get(name=name)
    except Model.DoesNotExist:
        raise PlacementError(f"no model named {name!r} in the catalog") from None


def explanation_data(placement: Placement) -> dict[str, Any]:
    grouped = placement.explanation.by_reason()
    attempts = []
    for profile, priority, placed in placement.explanation.attempts:
        reasons = [
            {
                "code": reason.value,
                "summary": reason.summary,
                "count": len(rejections),
                "nodes": [{"node": r.node, "message": r.message} for r in rejections],
            }
            for reason, rejections in grouped.get(profile, {}).items()
        ]
        attempts.append(
            {"profile": profile, "priority": priority, "placed": placed, "reasons": reasons}
        )
    route = route_text(placement.decision)
    text = placement.explanation.render()
    return {
        "model": placement.model,
        "placed": placement.decision is not None,
        "decision": decision_data(placement.decision) if placement.decision else None,
        "route": route,
        "attempts": attempts,
        "text": f"{route}\n{text}" if route else text,
    }


def route_text(decision: Decision | None) -> str:
    """Which interconnect a multi-node replica uses, and why."""
    if decision is None or len(decision.shards) < 2:
        return ""
    nodes = len(decision.shards)
    if decision.fabric and decision.fabric.startswith("nvlink:"):
        domain = decision.fabric.removeprefix("nvlink:")
        return (
            f"inside NVLink domain {domain}: all {nodes} nodes have every card joined and IMEX up, "
            "so the shards get NCCL_MNNVL_ENABLE=1 (InfiniBand is the fallback)"
        )
    text = (
        f"over fabric {decision.fabric}: no multi-node NVLink domain had {nodes} joined nodes "
        "that fit, or the profile names this fabric"
    )
    if decision.leaf:
        text += f"; all {nodes} nodes under one leaf switch, {leaf_name(decision.leaf)}"
    if decision.short_cabled:
        text += (
            f"; {', '.join(decision.short_cabled)} taken although a cable trained short "
            "(nodes with such cables come last)"
        )
    return text


def decision_data(decision: Decision) -> dict[str, Any]:
    return {
        "profile": decision.profile,
        "fabric": decision.fabric,
        "env": dict(decision.env),
        "threads": decision.threads,
        "shards": [
            {
                "node": s.node,
                "gpus": list(s.gpu_indices),
                "gpu_uuids": list(s.gpu_uuids),
                "adapters": list(s.adapters),
                "cpu_cores": s.cpu_cores,
                "memory_bytes": s.memory_bytes,
                "holds_weights": s.holds_weights,
            }
            for s in decision.shards
        ],
    }


def dry_run(model_name: str) -> Placement:
    model = _model(model_name)
    return scheduler.place(
        model.name, [profile_view(p) for p in model.profiles.all()], node_views()
    )


def place_replica(model_name: str) -> tuple[Replica | None, Placement]:
    """Place one more replica of the model, or record why it cannot be."""
    with transaction.atomic():
        _lock()
        model = _model(model_name)
        profiles = {p.name: p for p in model.profiles.all()}
        placement = scheduler.place(
            model.name, [profile_view(p) for p in profiles.values()], node_views()
        )
        data = explanation_data(placement)
        if placement.decision is None:
            _record(model, None, data)
            return None, placement
        decision = placement.decision
        replica = Replica.objects.create(
            model=model,
            profile=profiles[decision.profile],
            fabric=decision.fabric or "",
            env=dict(decision.env),
            explanation=data,
        )
        _record(model, replica, data)
        nodes = {n.name: n for n in Node.objects.filter(name__in=decision.nodes)}
        for rank, s in enumerate(decision.shards):
            shard = Shard.objects.create(
                replica=replica,
                node=nodes[s.node],
                rank=rank,
                gpu_indices=list(s.gpu_indices),
                adapters=list(s.adapters),
            )
            GpuClaim.objects.bulk_create(
                GpuClaim(shard=shard, node=nodes[s.node], index=i) for i in s.gpu_indices
            )
        desired.rebuild(n.pk for n in nodes.values())
        return replica, placement


def _record(model: Model, replica: Replica | None, data: dict[str, Any]) -> None:
    PlacementRecord.objects.update_or_create(
        model=model,
        defaults={
            "placed": replica is not None,
            "placed_replica": replica.pk if replica else None,
            "explanation": data,
        },
    )


@transaction.atomic
def release_replica(replica_id: int) -> None:
    """Release a replica whole: its shards and every claim they hold, and
    tell its nodes (their desired state drops the shards, so agents stop
    them)."""
    nodes = list(Shard.objects.filter(replica_id=replica_id).values_list("node_id", flat=True))
    Replica.objects.filter(pk=replica_id).delete()
    desired.rebuild(nodes)


def headroom(model_name: str) -> dict[str, int]:
    model = _model(model_name)
    return scheduler.headroom(
        model.name, [profile_view(p) for p in model.profiles.all()], node_views()
    )


def explain(model_name: str) -> dict[str, Any]:
    """The last placement attempt as recorded, with when it was made and
    what became of the replica it placed; if there has been none, a dry run
    now, marked as such.

    A record outlives what it describes: the replica it placed may since
    have failed or been released, and its nodes lost their cables. Shown
    bare, it reads as a placement that holds today."""
    now = timezone.now()
    record = PlacementRecord.objects.filter(model__name=model_name).first()
    if record is None:
        return {
            **explanation_data(dry_run(model_name)),
            **_when(now, now),
            "recorded_at": None,
            "dry_run": True,
            "placed_replica": None,
        }
    data = {
        **record.explanation,
        **_when(record.at, now),
        "recorded_at": record.at.isoformat(),
        "dry_run": False,
        # None: the attempt placed nothing, or was recorded before records
        # named their replica (unknown, not "released").
        "placed_replica": None,
    }
    if record.placed_replica is not None:
        state = (
            Replica.objects.filter(pk=record.placed_replica).values_list("state", flat=True).first()
        )
        data["placed_replica"] = {
            "id": record.placed_replica,
            "state": state,
            "released": state is None,
        }
        fate = _fate(record.placed_replica, state)
        if fate:
            data["text"] = f"{fate}\n{data['text']}"
    return data


def _when(made: datetime, now: datetime) -> dict[str, Any]:
    return {"made_at": made.isoformat(), "age_s": round((now - made).total_seconds(), 1)}


def _fate(replica_id: int, state: str | None) -> str:
    """A line for a recorded placement whose replica no longer serves."""
    if state is None:
        return (
            f"replica #{replica_id}, placed by this attempt, has been released: "
            "what follows is the decision as made then, not where the model runs now"
        )
    if state == ReplicaState.FAILED:
        return (
            f"replica #{replica_id}, placed by this attempt, has failed: "
            "the reconciler releases it and places a replacement"
        )
    return ""
