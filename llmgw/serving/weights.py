"""Where each model's weights already are, by physical fabric.

A multi-node replica forms inside one physical fabric, so "12 nodes hold
it" is not the question an operator asks: it is which fabric those nodes
are on, and which fabrics have none (a replica placed there downloads
first). A node's fabrics are the physical fabrics its ports were seen on,
as `llmgw ctl fabrics` counts them; a node with no port on a known fabric
is grouped as such rather than counted on any.

Holdings have no completeness notion: a node reports a model's weights
once its weights collector finds them in place, so every holding counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from llmgw.fabrics.models import PhysicalFabric, Port
from llmgw.inventory.models import ModelHolding, Node

NO_FABRIC = "no fabric known"


@dataclass(frozen=True)
class Group:
    """One physical fabric's nodes, or the nodes on none known."""

    identity: str | None
    label: str
    kind: str | None
    names: tuple[str, ...]
    nodes: frozenset[str]


class WeightsByFabric:
    """Loaded once per answer (a fixed number of queries, whatever the
    fleet), then asked for each model it shows."""

    def __init__(self, groups: list[Group], holders: dict[str, set[str]]) -> None:
        self.groups, self.holders = groups, holders

    def for_model(self, name: str) -> list[dict[str, Any]]:
        held = self.holders.get(name, set())
        return [
            {
                "fabric": g.identity,
                "label": g.label,
                "kind": g.kind,
                "names": list(g.names),
                "nodes": len(g.nodes),
                "holders": sorted(held & g.nodes),
            }
            for g in self.groups
        ]


def label(identity: str, names: set[str], shared_names: set[str]) -> str:
    """The agent.yaml name operators know a fabric by; with its identity
    when no name says it, or when one name covers several fabrics (then the
    name alone would not say which one)."""
    if not names:
        return identity
    text = ",".join(sorted(names))
    return f"{text}@{identity}" if names & shared_names else text


def load(within: Collection[str] | None = None) -> WeightsByFabric:
    """`within`: only these nodes (`ctl status --domain rack=r01`), each
    fabric counted by its nodes among them; None: the whole fleet."""
    # Names through joins, not looked up in the node list: a node that
    # joins between two of these queries is then missing, never a KeyError.
    node_names = set(Node.objects.values_list("name", flat=True))
    picked = None if within is None else node_names & set(within)
    if picked is not None:
        node_names = picked
    members: dict[int, set[str]] = defaultdict(set)
    declared: dict[int, set[str]] = defaultdict(set)
    # Every port seen on a fabric, the down ones too, as `ctl fabrics`
    # counts its nodes: a node with a cable out is still on that fabric.
    ports = Port.objects.filter(physical_fabric__isnull=False).values_list(
        "node__name", "physical_fabric_id", "declared_fabric"
    )
    for node, fabric_id, name in ports:
        if picked is not None and node not in picked:
            continue
        members[fabric_id].add(node)
        if name:
            declared[fabric_id].add(name)
    fabrics = {
        pk: (identity, kind)
        for pk, identity, kind in PhysicalFabric.objects.filter(pk__in=members).values_list(
            "pk", "identity", "kind"
        )
    }
    seen_under: dict[str, int] = defaultdict(int)
    for pk in fabrics:
        for name in declared[pk]:
            seen_under[name] += 1
    shared = {name for name, count in seen_under.items() if count > 1}
    groups = sorted(
        (
            Group(
                identity,
                label(identity, declared[pk], shared),
                kind,
                tuple(sorted(declared[pk])),
                frozenset(members[pk]),
            )
            for pk, (identity, kind) in fabrics.items()
        ),
        key=lambda g: g.label,
    )
    nowhere = frozenset(node_names) - {n for g in groups for n in g.nodes}
    if nowhere:
        groups.append(Group(None, NO_FABRIC, None, (), nowhere))
    holders: dict[str, set[str]] = defaultdict(set)
    for node, model in ModelHolding.objects.values_list("node__name", "model_name"):
        if picked is None or node in picked:
            holders[model].add(node)
    return WeightsByFabric(groups, holders)
