"""The thin service around the pure scheduler: load a snapshot, decide, and
say why. It stores nothing: serving stores a decision (serving.placing),
inside the transaction and under the lock that make it safe to act on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw.catalog.models import Model
from llmgw.placement import scheduler
from llmgw.placement.explaining import attempt_lines, lines
from llmgw.placement.fabric_maps import leaf_name
from llmgw.placement.snapshot import node_views, profile_view
from llmgw.placement.types import Attempts, Decision, Placement, Profile, Shard


class PlacementError(Exception):
    pass


def load_model(name: str) -> Model:
    try:
        model: Model = Model.objects.prefetch_related("profiles").get(name=name)
        return model
    except Model.DoesNotExist:
        raise PlacementError(f"no model named {name!r} in the catalog") from None


def decide(model: Model) -> Placement:
    """One more replica of the model on the fleet as it stands now: the
    highest-priority profile that fits, and why everywhere else was refused."""
    return scheduler.place(
        model.name, [profile_view(p) for p in model.profiles.all()], node_views()
    )


def dry_run(model_name: str) -> Placement:
    return decide(load_model(model_name))


def headroom(model_name: str) -> dict[str, int]:
    model = load_model(model_name)
    return scheduler.headroom(
        model.name, [profile_view(p) for p in model.profiles.all()], node_views()
    )


def room_for(model: Model, wanted: int) -> tuple[int, dict[str, Any] | None]:
    """Dry-run placing `wanted` more replicas on a copy of the inventory.
    Returns how many fit and, when short, the explanation of the first that
    did not."""
    inventory = scheduler.Inventory(node_views())
    profiles = [profile_view(p) for p in model.profiles.all()]
    for placed in range(wanted):
        placement = inventory.place(model.name, profiles)
        if placement.decision is None:
            return placed, explanation_data(placement)
        inventory.apply(placement.decision)
    return wanted, None


def decide_on(
    inventory: scheduler.Inventory, model: str, profiles: Sequence[Profile]
) -> tuple[Decision | None, Attempts]:
    """Place's choice without its explanation (Inventory.first_fit);
    record_data keeps what explain needs to judge every node on read."""
    return inventory.first_fit(model, profiles)


def record_data(model: str, decision: Decision | None, attempts: Attempts) -> dict[str, Any]:
    """What a placement stores: the decision and the profiles tried, without
    a line per node (judged on read, see judged)."""
    data: dict[str, Any] = {
        "model": model,
        "placed": decision is not None,
        "decision": decision_data(decision) if decision else None,
        "route": route_text(decision),
        "attempts": [
            {"profile": name, "priority": priority, "placed": placed, "reasons": []}
            for name, priority, placed in attempts
        ],
        "judged_on_read": True,
    }
    if decision is not None:
        data["decision"]["leaf"] = decision.leaf
        data["decision"]["short_cabled"] = list(decision.short_cabled)
    return data


def stored_decision(model: str, data: dict[str, Any]) -> Decision:
    shards = tuple(
        Shard(
            node=s["node"],
            gpu_indices=tuple(s["gpus"]),
            gpu_uuids=tuple(s["gpu_uuids"]),
            adapters=tuple(s["adapters"]),
            cpu_cores=s["cpu_cores"],
            memory_bytes=s["memory_bytes"],
            holds_weights=s["holds_weights"],
            power_w=s.get("power_w"),
            location=s.get("location", ""),
        )
        for s in data["shards"]
    )
    return Decision(
        model,
        data["profile"],
        shards,
        data.get("fabric"),
        dict(data.get("env") or {}),
        data.get("leaf"),
        tuple(data.get("short_cabled") or ()),
    )


def judged(
    model: str,
    profiles: Sequence[Profile],
    decision: Decision | None,
    attempts: Attempts,
    inventory: scheduler.Inventory,
) -> Placement:
    """A stored decision with its explanation, every node judged now on
    `inventory` (the fleet as it stands, the decision's own claims taken
    out by the caller): what explain renders. Same words as a fresh
    placement's while the fleet has not changed since."""
    return inventory.explained(model, profiles, decision, attempts)


def explanation_data(placement: Placement, judge_nodes: bool = True) -> dict[str, Any]:
    """`judge_nodes`: judge every node for the profiles tried. Without, the
    decision and its attempts only, and a line saying where every node's
    reason is read (explain judges them then)."""
    grouped = placement.explanation.by_reason() if judge_nodes else {}
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
    data: dict[str, Any] = {
        "model": placement.model,
        "placed": placement.decision is not None,
        "decision": decision_data(placement.decision) if placement.decision else None,
        "route": route_text(placement.decision),
        "attempts": attempts,
    }
    text = "\n".join(attempt_lines(data))
    data["text"] = f"{data['route']}\n{text}" if data["route"] else text
    data["lines"] = lines(data)
    if not judge_nodes:
        data["reasons_on_read"] = True
        data["lines"].append(f"every node's reason: llmgw ctl explain {placement.model}")
    return data


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
                "location": s.location,
                "power_w": s.power_w,
            }
            for s in decision.shards
        ],
    }
