"""The fabric map: every five minutes one healthy node on each InfiniBand
fabric runs ibnetdiscover, and the control plane parses what it printed.

The command goes down the agent's own stream (llmgw.inventory.commands):
nothing connects into a node, and a command reaches its agent within the
stream's poll interval. The text is parsed by a worker, not on the node
(nor in the web process that hears it: tasks.map_in_a_worker), so a
format the parser has not met is a control-plane upgrade, not one on every
node. A dump that fails to parse, or a command that fails, keeps the
previous map; the error (and the line it was on) is recorded beside it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from llmgw.fabrics import ibnetdiscover, topology
from llmgw.fabrics.choices import FabricKind
from llmgw.fabrics.findings import findings
from llmgw.fabrics.models import FabricMap, PhysicalFabric, Port
from llmgw.inventory import commands
from llmgw.inventory import services as inventory
from llmgw.inventory.models import AgentCommand, CommandState

log = logging.getLogger("llmgw.fabrics.sweep")

KIND = "ibnetdiscover"
FEATURE = f"command:{KIND}"
# A discovery of a few thousand adapters takes seconds; one that has not
# answered in two minutes is not going to.
TIMEOUT_S = 120
ACTOR = "fabric-sweep"
# What _candidates and the request read of each port's node.
NODE_COLUMNS = tuple(
    f"node__{name}"
    for name in (
        "name",
        "cordoned",
        "features",
        "state",
        "last_heartbeat_at",
        "heartbeat_interval_s",
    )
)


def _fabric_of(command: AgentCommand) -> int | None:
    fabric_id = (command.args or {}).get("fabric_id")
    if fabric_id is None:
        return None
    try:
        return int(fabric_id)
    except (TypeError, ValueError):
        return None


def _candidates(fabric: PhysicalFabric, ports: list[Port], now: datetime) -> list[Port]:
    """Ports that can discover the fabric: ACTIVE, on a Ready, uncordoned node
    whose agent answers ibnetdiscover. One per node, its first such port."""
    out: dict[int, Port] = {}
    for p in sorted(ports, key=lambda p: (p.node.name, p.device, p.port)):
        node = p.node
        if p.node_id in out or not p.active or p.link_layer == "Ethernet":
            continue
        if node.cordoned or FEATURE not in (node.features or []):
            continue
        if not inventory.is_ready(node, now):
            continue
        out[p.node_id] = p
    return list(out.values())


def sweep(fabric_id: int | None = None) -> dict[str, str]:
    """Ask one node per InfiniBand fabric for its map; returns, per fabric
    identity, the node asked or why none was. A fabric whose last request
    is still pending or sent is left alone."""
    now = timezone.now()
    fabrics = PhysicalFabric.objects.filter(kind=FabricKind.INFINIBAND).select_related("map")
    if fabric_id is not None:
        fabrics = fabrics.filter(pk=fabric_id)
    fabrics = list(fabrics)
    if not fabrics:
        return {}
    ports: dict[int, list[Port]] = {}
    # Only the node columns choosing a port reads: a node row also carries
    # its desired state (tens of kilobytes on a GPU node), telemetry and
    # samples, and joined to each of 18,000 ports of a 5,000-node fleet
    # that read ran past the statement timeout, so no fabric was mapped.
    for p in (
        Port.objects.filter(physical_fabric__in=fabrics)
        .select_related("node")
        .only(*NODE_COLUMNS, *(f.name for f in Port._meta.concrete_fields))
    ):
        ports.setdefault(p.physical_fabric_id, []).append(p)
    waiting = {
        _fabric_of(c)
        for c in AgentCommand.objects.filter(
            kind=KIND, state__in=[CommandState.PENDING, CommandState.SENT]
        ).only("args")
    }
    # The node whose last request failed is asked again only if it is the only one.
    failed: dict[int, int] = {}
    for c in (
        AgentCommand.objects.filter(kind=KIND)
        .exclude(state__in=[CommandState.PENDING, CommandState.SENT])
        .order_by("-pk")
        .only("args", "state", "node_id")[:200]
    ):
        fid = _fabric_of(c)
        if fid is not None and fid not in failed:
            failed[fid] = c.node_id if c.state == CommandState.FAILED else 0
    out: dict[str, str] = {}
    for fabric in fabrics:
        if fabric.pk in waiting:
            out[fabric.identity] = "a request is still waiting for its answer"
            continue
        candidates = _candidates(fabric, ports.get(fabric.pk, []), now)
        if not candidates:
            out[fabric.identity] = "no Ready node with an active port answers ibnetdiscover"
            continue
        last = getattr(fabric, "map", None)
        source = last.source_node if last is not None else ""

        def preference(p: Port, source: str = source, fid: int = fabric.pk) -> tuple[bool, bool]:
            return (p.node_id == failed.get(fid), p.node.name != source)

        port = min(candidates, key=preference)
        commands.send(
            port.node,
            KIND,
            {
                "fabric_id": fabric.pk,
                "fabric": fabric.identity,
                "device": port.device,
                "port": port.port,
            },
            actor=ACTOR,
            timeout_s=TIMEOUT_S,
        )
        out[fabric.identity] = port.node.name
    log.info("fabric sweep: %s", out)
    return out


def _record_error(fabric: PhysicalFabric, error: str, line: int | None, now: datetime) -> None:
    FabricMap.objects.update_or_create(
        fabric=fabric, defaults={"error": error[:10_000], "error_line": line, "error_at": now}
    )


def store_map(
    fabric: PhysicalFabric, analysis: dict[str, Any], taken_at: datetime, source_node: str
) -> None:
    """The fabric's new map, with its summary beside it for the readers
    that need nothing else."""
    FabricMap.objects.update_or_create(
        fabric=fabric,
        defaults={
            "taken_at": taken_at,
            "source_node": source_node,
            "analysis": analysis,
            # What it found, named, beside the counts: `ctl fabrics` says
            # which cable and which adapter without loading the whole map.
            "summary": {**(analysis.get("summary") or {}), "findings": findings(analysis)},
            "error": "",
            "error_line": None,
        },
    )


def store_result(command: AgentCommand) -> None:
    """What a node's ibnetdiscover printed, parsed and analysed into the
    fabric's map (in a worker: tasks.map_in_a_worker)."""
    fabric = PhysicalFabric.objects.filter(pk=_fabric_of(command)).first()
    if fabric is None:
        return
    now = timezone.now()
    node = command.node.name
    if command.state != CommandState.DONE:
        _record_error(fabric, f"ibnetdiscover on {node} failed: {command.error}", None, now)
        return
    try:
        # Outside the transaction: a big fabric takes a moment to read.
        analysis: dict[str, Any] = topology.analyze(ibnetdiscover.parse(command.output))
    except ibnetdiscover.ParseError as exc:
        _record_error(fabric, f"ibnetdiscover output from {node}: {exc}", exc.line_no, now)
        return
    with transaction.atomic():
        store_map(fabric, analysis, command.finished_at or now, node)
    log.info("fabric %s mapped from %s: %s", fabric.identity, node, analysis.get("summary") or {})
