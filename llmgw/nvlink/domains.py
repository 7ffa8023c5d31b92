"""Multi-node NVLink domains (GB200 NVL72, NVLink Switch systems), worked out
from what each card reports of its GPU fabric and each node of IMEX.

A card belongs to domain (ClusterUUID, CliqueId) once its fabric
registration completed with a non-zero ClusterUUID; the domain each card
names, and why it is not joined, are stored with its report
(llmgw.inventory.gpu_health) and read here from its CardView. A node is in
the domain for placement only when every card of it is joined and its IMEX
is up, because a replica spanning trays needs all of that to share memory;
otherwise the reasons say which card or what keeps it out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from llmgw.inventory.cards import CardView


@dataclass
class Tray:
    node: str
    imex_up: bool | None
    cards: list[CardView] = field(default_factory=list)
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
    """nodes: [{name, imex, gpus: [CardView]}]."""
    domains: dict[str, Domain] = {}
    for node in nodes:
        by_domain: dict[str, list[CardView]] = defaultdict(list)
        for gpu in node["gpus"]:
            if gpu.nvlink_domain is not None:
                by_domain[gpu.nvlink_domain].append(gpu)
        for did, cards in by_domain.items():
            up = imex_up(node.get("imex"))
            tray = Tray(node=node["name"], imex_up=up, cards=cards)
            if len(cards) != len(node["gpus"]):
                others = sorted(g.index for g in node["gpus"] if g.nvlink_domain != did)
                tray.reasons.append(f"GPUs {others} are not in this domain")
            for gpu in cards:
                problem = gpu.nvlink_problem
                if gpu.missing:
                    problem = "no longer seen by the driver"
                if problem:
                    tray.reasons.append(f"GPU {gpu.index}: {problem}")
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
