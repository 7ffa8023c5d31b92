"""`llmgw ctl fabric-test A B`: measure two nodes' fabric rail by rail.

doctor checks a node alone, and every check can pass while two nodes still
cannot reach each other. This asks the nodes' agents, over their command
streams (no SSH between nodes), to run ib_write_bw: B's agent serves, A's
runs the client, adapter by adapter as NCCL pairs them (mlx5_N with mlx5_N:
the same rail), one rail at a time so rails do not share a bottleneck and
blur each other's numbers. Each rail is graded against its link's rate.

An agent too old to answer is refused before anything runs, naming its
version: a test that silently skipped one node would read as a pass.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Any

import msgspec
from llmgw_agent.protocol import perftest as wire

from llmgw.fabrics.models import Port
from llmgw.inventory import commands
from llmgw.inventory import services as inventory
from llmgw.inventory.models import AgentCommand, CommandState, Node

# At least this share of the link's rate is "ok"; below it "degraded".
OK_SHARE = 0.90
TCP_PORT_BASE = 18515
# Beyond the run itself: queueing on the stream, perftest's setup and exchange.
SLACK_S = 30
POLL_S = 0.1


class Refused(Exception):
    """The test cannot start; nothing was sent to either agent."""


@dataclass
class Rail:
    rail: str
    a_device: str
    a_port: int
    b_device: str
    b_port: int
    expected_gbps: float | None = None
    measured_gbps: float | None = None
    grade: str = "failed"
    detail: str = ""
    # Said beside the grade without stopping the run.
    note: str = ""
    simulated: bool = False
    # "A", "B" or "A,B": the ends whose port is down ("" when none is).
    down: str = ""
    # An end trained below what the link should run at: a finding in itself,
    # whatever the measurement (which it caps).
    short: str = ""


def _rail_name(device: str) -> str:
    # mlx5_3 is rail 3 to NCCL; another naming is its own rail.
    m = re.fullmatch(r"[A-Za-z]+\d*_(\d+)", device)
    return m.group(1) if m else device


def _node(name: str) -> Node:
    node: Node | None = Node.objects.filter(name=name).first()
    if node is None:
        raise Refused(f"no node named {name!r}")
    if node.revoked_at is not None:
        raise Refused(f"{name} is revoked")
    missing = [f for f in wire.FEATURES if f not in (node.features or [])]
    if missing:
        version = node.agent_version or "of unknown version"
        raise Refused(
            f"{name} runs agent {version}, which does not answer the fabric test "
            f"(missing {', '.join(missing)}); upgrade its agent"
        )
    if not inventory.is_ready(node):
        raise Refused(f"{name} is not Ready: its agent has not sent a heartbeat in time")
    return node


def _supported(node: Node, ports: list[Port]) -> dict[tuple[str, int], float]:
    """What each port can run at, by (device, port). A port reports only
    the rate it trained at, and a down port a placeholder (10 Gb/s, SDR),
    so what it was built for is the fastest rate any of the node's ports on
    the same fabric trained at (one machine's rail adapters are one model),
    or the rate agent.yaml declares for that fabric, whichever is higher."""
    declared: dict[str, float] = {}
    for fabric in node.fabrics or []:
        if isinstance(fabric, dict) and fabric.get("rate_gbps"):
            declared[str(fabric.get("name") or "")] = float(fabric["rate_gbps"])
    best: dict[tuple[str, str], float] = {}
    for p in ports:
        if p.active and p.rate_gbps:
            key = (p.link_layer, p.declared_fabric)
            best[key] = max(best.get(key, 0.0), p.rate_gbps)
    out = {}
    for p in ports:
        rates = [best.get((p.link_layer, p.declared_fabric)), declared.get(p.declared_fabric)]
        known = [r for r in rates if r]
        if known:
            out[(p.device, p.port)] = max(known)
    return out


def _side(rail: Rail, side: str, p: Port, should: float | None) -> None:
    """What one end says about the rail: down, or trained below its link."""
    if not p.active:
        rail.down = ",".join(filter(None, (rail.down, side)))
        if not rail.detail:
            rail.detail = f"{p.device} on {side} is {p.state or 'of unknown state'}"
    elif should is not None and p.rate_gbps is not None and p.rate_gbps < should:
        rail.short = ", ".join(
            filter(None, (rail.short, f"{side}'s {p.device} trained at {p.rate_gbps:g} Gb/s"))
        )


def pair(a: Node, b: Node) -> list[Rail]:
    """The rails the two nodes share, by adapter name; an adapter on one side
    only is a rail that fails (NCCL would have no peer for it). Each rail is
    expected to run at the slower of its two ports' supported rates (see
    _supported), not at what the ports trained at: a cable trained at half
    its rate would otherwise set the bar it is graded against."""
    rows: dict[int, list[Port]] = {a.pk: [], b.pk: []}
    for p in Port.objects.filter(node__in=[a, b]).exclude(link_layer="").order_by("device"):
        rows[p.node_id].append(p)
    supported = {a.pk: _supported(a, rows[a.pk]), b.pk: _supported(b, rows[b.pk])}
    ports: dict[int, dict[str, Port]] = {a.pk: {}, b.pk: {}}
    for node_id, found in rows.items():
        for p in found:
            ports[node_id].setdefault(p.device, p)  # its first port
    rails = []
    for device in sorted(set(ports[a.pk]) | set(ports[b.pk]), key=_sort_key):
        pa, pb = ports[a.pk].get(device), ports[b.pk].get(device)
        rail = Rail(_rail_name(device), device, pa.port if pa else 1, device, pb.port if pb else 1)
        should = [
            supported[n.pk].get((p.device, p.port)) for n, p in ((a, pa), (b, pb)) if p is not None
        ]
        known = [r for r in should if r]
        rail.expected_gbps = min(known) if pa and pb and len(known) == 2 else None
        for side, p in (("A", pa), ("B", pb)):
            if p is None:
                rail.detail = f"no {device} on {side} ({(a if side == 'A' else b).name})"
            else:
                _side(rail, side, p, rail.expected_gbps)
        if rail.short and rail.expected_gbps is not None:
            rail.short += f", where the link should run at {rail.expected_gbps:g} Gb/s"
        rails.append(rail)
    return rails


def _sort_key(device: str) -> tuple[int, str]:
    name = _rail_name(device)
    return (int(name), device) if name.isdigit() else (1 << 30, device)


def _wait(command: AgentCommand, deadline: float) -> AgentCommand:
    while time.monotonic() < deadline:
        command.refresh_from_db()
        if command.state in (CommandState.DONE, CommandState.FAILED):
            return command
        time.sleep(POLL_S)
    command.refresh_from_db()
    return command


def _ask(node: Node, kind: str, args: dict[str, Any], timeout_s: int, actor: str) -> str:
    """The command's output; raises RuntimeError saying why there is none."""
    command = commands.send(node, kind, args, actor=actor, timeout_s=timeout_s)
    done = _wait(command, time.monotonic() + timeout_s)
    if done.state == CommandState.DONE:
        output: str = done.output
        return output
    if done.state == CommandState.FAILED:
        raise RuntimeError(f"{node.name}: {done.error}")
    raise RuntimeError(f"{node.name}: no answer to {kind} within {timeout_s} s ({done.state})")


def grade(rail: Rail) -> None:
    if rail.measured_gbps is None:
        rail.grade = "failed"
    elif rail.expected_gbps is None:
        rail.grade = "ungraded"
        rail.detail = rail.detail or "the link's rate is unknown"
    elif rail.short:
        rail.grade = "degraded"
        rail.detail = rail.detail or rail.short
    elif rail.measured_gbps >= OK_SHARE * rail.expected_gbps:
        rail.grade = "ok"
    else:
        rail.grade = "degraded"
        share = rail.measured_gbps / rail.expected_gbps
        rail.detail = rail.detail or f"{share:.0%} of the link's rate (ok from {OK_SHARE:.0%})"


def _decode(output: str, kind: type[Any], node: Node) -> Any:
    try:
        return msgspec.json.decode(output, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RuntimeError(f"{node.name} answered something unreadable: {exc}") from None


def run_rail(
    a: Node, b: Node, rail: Rail, index: int, duration_s: int, size: int, actor: str
) -> None:
    """B serves, A runs the client, B's server is stopped (waited for): in
    that order, so the client never races a server that is not up."""
    timeout_s = duration_s + SLACK_S
    common = {"tcp_port": TCP_PORT_BASE + index, "duration_s": duration_s, "size": size}
    server = {"device": rail.b_device, "port": rail.b_port, **common}
    started = _decode(_ask(b, wire.SERVER_START, server, timeout_s, actor), wire.ServerStarted, b)
    try:
        client = {"device": rail.a_device, "port": rail.a_port, "server": b.address, **common}
        out = _ask(a, wire.CLIENT, client, timeout_s, actor)
        done: wire.ClientDone = _decode(out, wire.ClientDone, a)
    finally:
        stop = {"tcp_port": common["tcp_port"], "wait_s": 10.0}
        try:
            stopped = _decode(
                _ask(b, wire.SERVER_STOP, stop, timeout_s, actor), wire.ServerStopped, b
            )
            if not stopped.finished and not rail.detail:
                rail.detail = f"B's server: {stopped.error}"
        except RuntimeError as exc:  # the client's number still stands
            rail.detail = rail.detail or f"stopping B's server: {exc}"
    rail.measured_gbps = done.reading.bw_average_gbps
    rail.simulated = done.simulated or started.simulated


def run(
    a_name: str, b_name: str, *, duration_s: int = 5, size: int = 65536, actor: str = "operator"
) -> dict[str, Any]:
    """Test every rail the two nodes share, one at a time; refuses (Refused)
    before sending anything when either agent cannot answer."""
    if a_name == b_name:
        raise Refused("A and B are the same node; a fabric test needs two")
    if not 1 <= duration_s <= 20 or not 1 <= size <= 1 << 30:
        raise Refused("duration_s must be 1..20 and size 1..1073741824")
    a, b = _node(a_name), _node(b_name)
    if not b.address:
        raise Refused(f"{b.name}'s address is unknown (it has not registered): A cannot reach it")
    rails = pair(a, b)
    if not rails:
        raise Refused(f"{a.name} and {b.name} report no RDMA adapters")
    for index, rail in enumerate(rails):
        if not rail.detail:
            try:
                run_rail(a, b, rail, index, duration_s, size, actor)
            except RuntimeError as exc:
                rail.detail = str(exc)[:2000]
        grade(rail)
    return {
        "a": a.name,
        "b": b.name,
        "duration_s": duration_s,
        "size": size,
        "ok_share": OK_SHARE,
        "simulated": any(r.simulated for r in rails),
        # Scripts read this (and ctl's exit status): every rail ok, none ungraded.
        "ok": all(r.grade == "ok" for r in rails),
        "rails": [asdict(r) for r in rails],
    }
