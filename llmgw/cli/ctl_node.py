"""What `llmgw ctl node NAME` prints beyond the node's row: its cards, its
ports, the replicas on it, its cordon and how long ago it last beat.
Unknown is printed as "-" or "unknown", never as 0: a port that did not
say its rate is not a port at 0 Gb/s."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmgw.cli.ctl_client import DASH, Api, table
from llmgw.units import format_bytes


def ago(seconds: float) -> str:
    """ "12 s", "4 min", "3 h", "2 d": how long ago, to the unit that reads."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 2 * 3600:
        return f"{s // 60} min"
    if s < 2 * 86400:
        return f"{s // 3600} h"
    return f"{s // 86400} d"


def heartbeat_line(node: dict[str, Any], now: datetime | None) -> str:
    """The last heartbeat's age against the server's clock (its Date), then
    the time itself; "never" for a node that has not beaten."""
    at = node.get("last_heartbeat_at")
    agent = f"agent {node.get('agent_version') or DASH}"
    if not at:
        return f"{agent}, last heartbeat: never"
    when = datetime.fromisoformat(at)
    age = ((now or datetime.now(UTC)) - when).total_seconds()
    return f"{agent}, last heartbeat {ago(age)} ago ({at})"


def cordon_line(node: dict[str, Any]) -> str:
    who = node.get("cordoned_by") or "unknown"
    when = node.get("cordoned_at") or "unknown"
    return f"cordoned by {who} at {when}: {node.get('cordon_reason') or 'no reason given'}"


def card_lines(node: dict[str, Any]) -> list[str]:
    cards = node.get("gpus") or []
    if not cards:
        return ["cards: none reported"]
    rows = [
        [
            str(c["index"]),
            c.get("gpu_class") or DASH,
            format_bytes(c.get("memory_total_bytes")),
            "healthy" if c.get("healthy") else f"unhealthy: {c.get('unhealthy_reason') or DASH}",
        ]
        for c in cards
    ]
    return [table(["CARD", "CLASS", "MEMORY", "HEALTH"], rows)]


def rate(port: dict[str, Any]) -> str:
    gbps = port.get("rate_gbps")
    if gbps is None:
        return port.get("rate_text") or DASH
    return f"{gbps:g} Gb/s"


def port_state(port: dict[str, Any]) -> str:
    state, phys = port.get("state") or DASH, port.get("phys_state")
    return f"{state} ({phys})" if phys else state


def port_fabric(port: dict[str, Any]) -> str:
    """The fabric agent.yaml names, then the physical one it was found on."""
    declared, found = port.get("declared_fabric"), port.get("physical_fabric")
    if declared and found:
        return f"{declared} ({found})"
    return declared or found or DASH


def port_lines(ports: list[dict[str, Any]]) -> list[str]:
    if not ports:
        return ["ports: none reported"]
    rows = [[p["device"], str(p["port"]), port_state(p), rate(p), port_fabric(p)] for p in ports]
    return [table(["DEVICE", "PORT", "STATE", "RATE", "FABRIC"], rows)]


def _cores(shard: dict[str, Any]) -> str:
    reserved, busy = shard.get("reserved_cores"), shard.get("cpu_cores")
    text = DASH if reserved is None else str(reserved)
    return text + (f" (busy {busy:.1f})" if busy is not None else "")


def _memory(shard: dict[str, Any]) -> str:
    reserved, used = shard.get("reserved_memory_bytes"), shard.get("memory_bytes")
    text = format_bytes(reserved)
    return text + (f" (uses {format_bytes(used)})" if used is not None else "")


def replica_lines(name: str, replicas: list[dict[str, Any]]) -> list[str]:
    rows = []
    for r in replicas:
        for s in r["nodes"]:
            if s["node"] != name:
                continue
            state = r["state"] if s["state"] == r["state"] else f"{r['state']} (shard {s['state']})"
            of = f" of {len(r['nodes'])}" if len(r["nodes"]) > 1 else ""
            rows.append(
                [
                    f"#{r['id']}" + (f" rank {s['rank']}{of}" if of else ""),
                    r["model"],
                    r["profile"],
                    ",".join(str(g) for g in s["gpus"]) or DASH,
                    _cores(s),
                    _memory(s),
                    state,
                    ago(r["age_s"]),
                ]
            )
    if not rows:
        return ["replicas: none"]
    headers = ["REPLICA", "MODEL", "PROFILE", "GPUS", "CORES", "MEMORY", "STATE", "AGE"]
    return [table(headers, rows)]


def sections(api: Api, node: dict[str, Any]) -> list[str]:
    """Cards, ports and replicas, each a block of its own."""
    name = node["name"]
    ports = api.get("/api/v1/fabrics/ports", [("node", name)])
    replicas = api.get("/api/v1/replicas", [("node", name)])
    out: list[str] = []
    for block in (card_lines(node), port_lines(ports), replica_lines(name, replicas)):
        out += ["", *block]
    return out
