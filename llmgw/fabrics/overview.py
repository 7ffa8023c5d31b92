"""What /api/v1/fabrics, the cluster page and the metrics say about fabrics:
each physical fabric with its subnet managers and problems, and the
warnings that only show across fabrics and names."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.utils import timezone

from llmgw.fabrics.choices import FabricKind, Problem, link_up
from llmgw.fabrics.models import MasterChange, PhysicalFabric, Port
from llmgw.fabrics.services import GONE
from llmgw.inventory.api.filters import ready_q
from llmgw.inventory.models import Node


class PortRow(NamedTuple):
    """What the overview reads of a port: plain values, not a model
    instance with its node's (5,000 nodes have ~20,000 ports, and building
    them as instances cost 1.3 s of CPU on every cluster page)."""

    node: str
    device: str
    port: int
    physical_fabric_id: int | None
    identity: str | None
    declared_fabric: str
    link_layer: str
    state: str
    phys_state: str
    sm_guid: str

    @property
    def active(self) -> bool:
        return link_up(self.state, self.phys_state)


def port_rows() -> list[PortRow]:
    columns = ("node__name", "device", "port", "physical_fabric_id", "physical_fabric__identity")
    rest = ("declared_fabric", "link_layer", "state", "phys_state", "sm_guid")
    # In the model's order (node, device, port), so warnings read in one order.
    return [PortRow(*r) for r in Port.objects.values_list(*columns, *rest)]


def _port_name(p: PortRow) -> str:
    return f"{p.node}:{p.device}/{p.port}"


@dataclass
class PortIndex:
    """The ports by physical fabric, the declared names on each fabric and
    the fabrics under each name, the ports up with no subnet manager by
    declared name, and what the ports alone show is wrong."""

    by_fabric: dict[int, list[PortRow]] = field(default_factory=lambda: defaultdict(list))
    names_by_fabric: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    fabrics_by_name: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    unmanaged: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    warnings: list[dict[str, Any]] = field(default_factory=list)


def _index_ports(ports: list[PortRow]) -> PortIndex:
    index = PortIndex()
    for p in ports:
        if p.physical_fabric_id:
            index.by_fabric[p.physical_fabric_id].append(p)
            if p.declared_fabric:
                index.names_by_fabric[p.physical_fabric_id].add(p.declared_fabric)
                index.fabrics_by_name[p.declared_fabric].add(p.identity or "")
        if p.active and not p.declared_fabric:
            index.warnings.append(
                {
                    "kind": "undeclared_adapter",
                    "port": _port_name(p),
                    "message": f"{_port_name(p)} is up but no fabric in agent.yaml names it",
                }
            )
        if p.active and p.link_layer != "Ethernet" and not p.physical_fabric_id:
            index.warnings.append(
                {
                    "kind": "cannot_check",
                    "port": _port_name(p),
                    "node": p.node,
                    "message": f"{_port_name(p)} is up but no subnet manager answered: "
                    "its fabric cannot be checked, so it is kept apart",
                }
            )
        if p.state == "INIT" and p.phys_state == "LinkUp":
            index.unmanaged[p.declared_fabric].append(_port_name(p))
    for name, identities in sorted(index.fabrics_by_name.items()):
        if len(identities) > 1:
            index.warnings.append(
                {
                    "kind": "name_covers_fabrics",
                    "name": name,
                    "fabrics": sorted(identities),
                    "message": f"{name} covers {len(identities)} separate fabrics: "
                    f"{', '.join(sorted(identities))}; a replica is formed on one only",
                }
            )
    return index


def _problems(
    f: PhysicalFabric,
    members: list[PortRow],
    names: list[str],
    unmanaged: dict[str, list[str]],
    changes: list[MasterChange],
    now: datetime,
) -> list[dict[str, Any]]:
    """What is wrong with an InfiniBand fabric; nothing is checked on RoCE."""
    if f.kind != FabricKind.INFINIBAND:
        return []
    problems = []
    standbys = [m for m in f.managers.all() if m.guid != f.master_guid and m.state != GONE]
    if not standbys:
        problems.append(
            {
                "code": Problem.NO_STANDBY,
                "message": "no standby subnet manager: the fabric cannot survive losing its master",
            }
        )
    masters = sorted({p.sm_guid for p in members if p.sm_guid})
    if len(masters) > 1:
        problems.append(
            {
                "code": Problem.MASTER_DISAGREEMENT,
                "message": f"ports disagree on the master: {', '.join(masters)}",
            }
        )
    init = [port for name in names for port in unmanaged.get(name, [])]
    if init:
        problems.append(
            {
                "code": Problem.NO_SUBNET_MANAGER,
                "message": f"{len(init)} port(s) up with no subnet manager (INIT): "
                f"{', '.join(init[:8])}",
            }
        )
    if any(c.at >= now - timedelta(hours=1) for c in changes):
        problems.append(
            {"code": Problem.RECENT_FAILOVER, "message": "the master changed in the last hour"}
        )
    return problems


def _fabric_row(
    f: PhysicalFabric,
    members: list[PortRow],
    names: list[str],
    problems: list[dict[str, Any]],
    changes: list[MasterChange],
    ready: set[str],
) -> dict[str, Any]:
    # A NotReady node's ports are as it last said them, not as they are: its
    # ports are counted apart, neither up nor down, and the node by name.
    heard = [p for p in members if p.node in ready]
    return {
        "id": f.pk,
        "identity": f.identity,
        "kind": f.kind,
        "names": names,
        "master": {"guid": f.master_guid, "priority": f.master_priority} if f.master_guid else None,
        "subnet_managers": [
            {
                "guid": m.guid,
                "lid": m.lid,
                "priority": m.priority,
                "state": m.state,
                "master": m.guid == f.master_guid,
                "last_seen": m.last_seen,
            }
            for m in f.managers.all()
        ],
        "nodes": sorted({p.node for p in members}),
        "not_ready_nodes": sorted({p.node for p in members if p.node not in ready}),
        # Every port seen on the fabric, the down ones too: a dark
        # node is still cabled to it and still missing from it.
        "ports": len(members),
        "active_ports": sum(1 for p in heard if p.active),
        "down_ports": sum(1 for p in heard if not p.active),
        "not_ready_ports": len(members) - len(heard),
        # Each down port by name: a count alone sends the operator looking.
        "down_port_names": [
            f"{_port_name(p)} ({p.state or '?'}, {p.phys_state or '?'})"
            for p in heard
            if not p.active
        ],
        "problems": problems,
        "master_changes": [
            {
                "at": c.at,
                "from": c.previous_guid,
                "to": c.master_guid,
                "reported_by": c.reported_by,
            }
            for c in changes
        ],
        "map": _map_summary(f),
        "last_seen": f.last_seen,
    }


def build() -> dict[str, Any]:
    now = timezone.now()
    ports = _index_ports(port_rows())
    # The map's summary is stored beside it: its analysis (the whole map)
    # is left in the database.
    fabrics = PhysicalFabric.objects.select_related("map").defer("map__analysis")
    changes: dict[int, list[MasterChange]] = defaultdict(list)
    for change in MasterChange.objects.filter(at__gte=now - timedelta(days=1)):
        changes[change.fabric_id].append(change)
    warnings = ports.warnings
    ready = set(Node.objects.filter(ready_q(now)).values_list("name", flat=True))
    out = []
    for f in fabrics.prefetch_related("managers"):
        members = ports.by_fabric.get(f.pk, [])
        names = sorted(ports.names_by_fabric.get(f.pk, set()))
        problems = _problems(f, members, names, ports.unmanaged, changes[f.pk], now)
        if len(names) > 1:
            warnings.append(
                {
                    "kind": "names_share_fabric",
                    "fabric": f.identity,
                    "names": names,
                    "message": f"{' and '.join(names)} are one fabric ({f.identity})",
                }
            )
        out.append(_fabric_row(f, members, names, problems, changes[f.pk], ready))
    for name, init in sorted(ports.unmanaged.items()):
        if name and name not in {n for f in out for n in f["names"]}:
            warnings.append(
                {
                    "kind": "no_subnet_manager",
                    "name": name,
                    "message": f"{name}: {len(init)} port(s) up with no subnet manager (INIT)",
                }
            )
    return {"fabrics": out, "warnings": warnings}


def _map_summary(fabric: PhysicalFabric) -> dict[str, Any] | None:
    m = getattr(fabric, "map", None)
    if m is None:
        return None
    return {
        "taken_at": m.taken_at,
        "source_node": m.source_node,
        "summary": m.summary,
        "error": m.error or None,
        "error_line": m.error_line,
    }
