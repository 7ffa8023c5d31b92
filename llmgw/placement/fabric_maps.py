"""A node's ports and the fabric maps as placement reads them: the leaf
switch each of the node's fabrics reaches it through, and the fabrics on
which one of its cables trained short, from each map's stored analysis.
Split from snapshot.py, which builds the views from them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from llmgw.database import rows
from llmgw.fabrics.choices import link_up
from llmgw.fabrics.models import FabricMap, Port
from llmgw.fabrics.rails import device_number
from llmgw.fabrics.topology import split_description
from llmgw.inventory.models import Node


class FabricRef(NamedTuple):
    identity: str


class PortFacts(NamedTuple):
    """What placement reads of a port, as plain values: the fleet's ports
    (four a node) built as Port instances with their fabrics cost a second
    of every whole read at 5,000 nodes. Read as a Port reads."""

    node_id: int
    device: str
    declared_fabric: str
    link_layer: str
    state: str
    phys_state: str
    port_guid: str
    node_guid: str
    physical_fabric_id: int | None
    physical_fabric: FabricRef | None

    @property
    def active(self) -> bool:
        return link_up(self.state, self.phys_state)


@dataclass
class MapIndex:
    """What placement needs of one fabric map: each adapter's leaf, and the
    adapters with a cable trained short; by GUID and by "host mlx5_N"."""

    leaf: dict[str, str] = field(default_factory=dict)
    leaf_by_name: dict[tuple[str, str], str] = field(default_factory=dict)
    degraded: set[str] = field(default_factory=set)
    degraded_by_name: set[tuple[str, str]] = field(default_factory=set)
    leaf_names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, analysis: dict[str, Any]) -> MapIndex:
        index = cls()
        for sw in analysis.get("switches") or []:
            if sw.get("tier") == "leaf":
                index.leaf_names[sw["guid"]] = sw.get("description") or ""
        for a in analysis.get("adapters") or []:
            if a.get("role") != "adapter" or not a.get("leaf_guid"):
                continue
            for guid in (a["guid"], *(a.get("port_guids") or {}).values()):
                index.leaf[guid] = a["leaf_guid"]
            if a.get("node") and a.get("device"):
                index.leaf_by_name[(a["node"], a["device"])] = a["leaf_guid"]
        for link in analysis.get("degraded_links") or []:
            for end in (link["a"], link["b"]):
                index.degraded.update((end["guid"], end["port_guid"]))
                node, device = split_description(end.get("description") or "")
                if node and device:
                    index.degraded_by_name.add((node, device))
        return index


# fabric pk -> (the map's taken_at, its index): a map changes every five
# minutes at most, placement runs far more often.
_MAP_INDEXES: dict[int, tuple[datetime | None, MapIndex]] = {}


def map_indexes() -> dict[int, MapIndex]:
    # Composed once: read with every node the warm fleet reads again.
    current = dict(rows.values("analysed maps", _analysed, "fabric_id", None))
    stale = [pk for pk, at in current.items() if _MAP_INDEXES.get(pk, (None,))[0] != at]
    if stale:  # nothing composed when no map changed: the usual case
        for pk, at, analysis in FabricMap.objects.filter(fabric_id__in=stale).values_list(
            "fabric_id", "taken_at", "analysis"
        ):
            _MAP_INDEXES[pk] = (at, MapIndex.build(analysis or {}))
    for pk in set(_MAP_INDEXES) - set(current):
        del _MAP_INDEXES[pk]
    return {pk: entry[1] for pk, entry in _MAP_INDEXES.items()}


def _analysed() -> Any:
    return FabricMap.objects.filter(analysis__isnull=False).values_list("fabric_id", "taken_at")


def leaf_name(guid: str) -> str:
    """ "leaf-r0-g1 (0xfc6a...)" for a leaf of a map already read; the GUID alone otherwise."""
    for _, index in _MAP_INDEXES.values():
        name = index.leaf_names.get(guid)
        if name:
            return f"{name} ({guid})"
    return guid


def map_view(
    node: Node,
    ports: list[Port] | list[PortFacts],
    fabrics: dict[str, tuple[str, ...]],
    maps: dict[int, MapIndex],
) -> tuple[dict[str, str], frozenset[str]]:
    """The leaf switch each of the node's fabrics reaches it through (the one
    most of its adapters hang off; a tie goes to its lowest-numbered
    adapter's, which in a rail-optimised fabric names its leaf group), and
    the fabrics on which one of its cables trained short."""
    leaves: dict[str, str] = {}
    degraded: set[str] = set()
    for key in fabrics:
        name, _, identity = key.partition("@")
        mine = [
            p
            for p in ports
            if p.declared_fabric == name
            and p.active
            and p.physical_fabric is not None
            and p.physical_fabric.identity == identity
            and p.physical_fabric_id in maps
        ]
        found: list[tuple[int, str, str]] = []
        for p in mine:
            index = maps[p.physical_fabric_id]  # type: ignore[index]
            leaf = (
                index.leaf.get(p.port_guid)
                or index.leaf.get(p.node_guid)
                or index.leaf_by_name.get((node.name, p.device))
            )
            if leaf is not None:
                found.append((device_number(p.device) or 0, p.device, leaf))
            if (
                (p.port_guid and p.port_guid in index.degraded)
                or (p.node_guid and p.node_guid in index.degraded)
                or (node.name, p.device) in index.degraded_by_name
            ):
                degraded.add(key)
        if found:
            found.sort()
            counts = Counter(leaf for _, _, leaf in found)
            top = max(counts.values())
            leaves[key] = next(leaf for _, _, leaf in found if counts[leaf] == top)
    return leaves, frozenset(degraded)
