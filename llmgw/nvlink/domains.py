"""Multi-node NVLink domains (GB200 NVL72, NVLink Switch systems), worked out
from what each card reports of its GPU fabric and each node of IMEX.

A card belongs to domain (ClusterUUID, CliqueId) once its fabric
registration completed with a non-zero ClusterUUID. A single machine's
NVSwitch reports a cluster of zeros: no domain. A node is in the domain for
placement only when every card of it is joined and its IMEX is up, because
a replica spanning trays needs all of that to share memory; otherwise the
reasons say which card or what keeps it out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

ZERO_UUIDS = {"", "00000000-0000-0000-0000-000000000000"}


def domain_of(fabric: dict[str, Any] | None) -> str | None:
    """The domain a card's fabric names, joined or not; None for none."""
    if not fabric:
        return None
    cluster = (fabric.get("cluster_uuid") or "").strip().lower()
    if cluster in ZERO_UUIDS or fabric.get("multi_node") is False or set(cluster) <= {"0", "-"}:
        return None
    return f"{cluster}/{fabric.get('clique_id', 0)}"


def card_problem(fabric: dict[str, Any] | None) -> str:
    """Why a card of a domain is not joined, or degraded; '' when it is well."""
    if not fabric:
        return "fabric state not reported"
    state, status = fabric.get("state"), fabric.get("status")
    if state != "completed":
        return f"fabric registration {state or 'unknown'}" + (f" ({status})" if status else "")
    if status and status != "success":
        return f"fabric registration completed with status {status}"
    if fabric.get("health") in ("unhealthy",):
        return "fabric health unhealthy"
    return ""


def degraded(fabric: dict[str, Any] | None) -> bool:
    return bool(fabric) and (
        fabric.get("bandwidth") == "degraded" or fabric.get("health") == "limited_capacity"
    )


@dataclass
class Tray:
    node: str
    imex_up: bool | None
    cards: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def joined(self) -> bool:
        return not self.reasons


@dataclass
class Domain:
    id: str
    trays: list[Tray] = field(default_factory=list)

    @property
    def joined_nodes(self) -> list[str]:
        return [t.node for t in self.trays if t.joined]


def imex_up(imex: dict[str, Any] | None) -> bool | None:
    if imex is None:
        return None
    return bool(imex.get("up"))


def build(nodes: list[dict[str, Any]]) -> dict[str, Domain]:
    """nodes: [{name, imex, gpus: [{index, fabric, healthy, missing}]}]."""
    domains: dict[str, Domain] = {}
    for node in nodes:
        by_domain: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for gpu in node["gpus"]:
            did = domain_of(gpu.get("fabric"))
            if did is not None:
                by_domain[did].append(gpu)
        for did, cards in by_domain.items():
            up = imex_up(node.get("imex"))
            tray = Tray(node=node["name"], imex_up=up, cards=cards)
            if len(cards) != len(node["gpus"]):
                others = sorted(g["index"] for g in node["gpus"] if g not in cards)
                tray.reasons.append(f"GPUs {others} are not in this domain")
            for gpu in cards:
                problem = card_problem(gpu.get("fabric"))
                if gpu.get("missing"):
                    problem = "no longer seen by the driver"
                if problem:
                    tray.reasons.append(f"GPU {gpu['index']}: {problem}")
            if up is None:
                tray.reasons.append("IMEX not reported (nvidia-imex-ctl missing?)")
            elif not up:
                tray.reasons.append("IMEX is down")
            domains.setdefault(did, Domain(did)).trays.append(tray)
    return domains


def placement_domain(node: dict[str, Any]) -> tuple[str | None, str]:
    """The domain placement may use this node in (or None), and, when its
    cards name one it cannot be used in, why."""
    built = build([node])
    if not built:
        return None, ""
    if len(built) > 1:
        return None, f"its cards name {len(built)} different NVLink domains"
    (domain,) = built.values()
    tray = domain.trays[0]
    return (domain.id, "") if tray.joined else (None, "; ".join(tray.reasons))
