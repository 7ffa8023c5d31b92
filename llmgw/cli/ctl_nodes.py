"""`llmgw ctl` on nodes: list, show, cordon, label, and the fleet in a few lines."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmgw.cli.ctl_client import DASH, Api, CtlError, table
from llmgw.units import format_bytes, format_bytes_pair


def free_of_total(free: int | None, total: int | None) -> str:
    """Free of total ("600 GiB/1000 GiB"), printed as a pair so that 999.9
    of 1000 GiB free never reads as all of it."""
    if free is None or total is None:
        return f"{format_bytes(free)}/{format_bytes(total)}"
    return "/".join(format_bytes_pair(free, total))


def disk_text(disk: dict[str, int] | None) -> str:
    if not disk:
        return DASH
    return free_of_total(disk.get("free_bytes"), disk.get("total_bytes"))


def node_row(node: dict[str, Any]) -> list[str]:
    state = node["state"] + (",Cordoned" if node["cordoned"] else "")
    gpus = node.get("gpus") or []
    gpu_text = f"{len(gpus)}x{gpus[0]['gpu_class'] or '?'}" if gpus else DASH
    labels = ",".join(f"{k}={v}" for k, v in sorted((node.get("labels") or {}).items())) or DASH
    cpus = DASH if node.get("cpus") is None else str(node["cpus"])
    return [
        node["name"],
        state,
        cpus,
        format_bytes(node.get("memory_total_bytes")),
        disk_text(node.get("disk_local")),
        gpu_text,
        labels,
    ]


NODE_HEADERS = ["NAME", "STATE", "CPUS", "MEM", "DISK", "GPUS", "LABELS"]


def engine_lines(node: dict[str, Any]) -> list[str]:
    """The node's own words for engines not installed, and its warnings."""
    lines = [
        f"{node['name']}: {e['name']} {e.get('version') or ''}: {e['status']}: {e.get('message') or ''}".rstrip()
        for e in node.get("engines") or []
        if e.get("status") != "installed"
    ]
    lines += [f"{node['name']}: warning: {w}" for w in node.get("warnings") or []]
    return lines


def cmd_nodes(api: Api, args: argparse.Namespace) -> str:
    nodes = api.call("GET", "/api/v1/nodes")
    if args.json:
        return json.dumps(nodes, indent=2)
    notes = [line for n in nodes for line in engine_lines(n)]
    return table(NODE_HEADERS, [node_row(n) for n in nodes]) + (
        "\n\n" + "\n".join(notes) if notes else ""
    )


def cmd_node(api: Api, args: argparse.Namespace) -> str:
    node = api.call("GET", f"/api/v1/nodes/{args.name}")
    if args.json:
        return json.dumps(node, indent=2)
    lines = [table(NODE_HEADERS, [node_row(node)]), ""]
    if node["cordoned"]:
        lines.append(
            f"cordoned by {node['cordoned_by']} at {node['cordoned_at']}: {node['cordon_reason']}"
        )
    lines.append(
        f"agent {node.get('agent_version') or DASH}, last heartbeat {node.get('last_heartbeat_at') or DASH}"
    )
    engines = node.get("engines") or []
    if node.get("engines_probed") is None:
        lines.append("engines: - (agent too old to say)")
    for e in engines:
        lines.append(
            f"engine {e['name']} {e.get('version') or '-'}: {e['status']}: {e.get('message') or ''}".rstrip()
        )
    lines += [f"warning: {w}" for w in node.get("warnings") or []]
    fs = node.get("filesystems") or []
    if fs:
        rows = [
            [
                f["mount"],
                f["fstype"],
                "shared" if f["shared"] else "local",
                free_of_total(f["free_bytes"], f["total_bytes"]),
            ]
            for f in fs
        ]
        lines += ["", table(["MOUNT", "TYPE", "KIND", "FREE/TOTAL"], rows)]
    else:
        lines.append("filesystems: - (not reported)")
    return "\n".join(lines)


def cmd_cordon(api: Api, args: argparse.Namespace) -> str:
    node = api.call("POST", f"/api/v1/nodes/{args.name}/cordon", {"reason": args.reason or ""})
    return f"{node['name']} cordoned: {node['cordon_reason']}"


def cmd_uncordon(api: Api, args: argparse.Namespace) -> str:
    node = api.call("POST", f"/api/v1/nodes/{args.name}/uncordon", {"reason": args.reason or ""})
    return f"{node['name']} uncordoned"


def cmd_label(api: Api, args: argparse.Namespace) -> str:
    labels: dict[str, str | None] = {}
    for item in args.labels:
        if item.endswith("-") and "=" not in item:
            labels[item[:-1]] = None
        elif "=" in item:
            key, value = item.split("=", 1)
            labels[key] = value
        else:
            raise CtlError(f"{item!r}: write key=value to set a label, key- to remove it")
    node = api.call("POST", f"/api/v1/nodes/{args.name}/labels", {"labels": labels})
    return f"{node['name']}: " + ",".join(f"{k}={v}" for k, v in sorted(node["labels"].items()))


def cmd_status(api: Api, args: argparse.Namespace) -> str:
    nodes = api.call("GET", "/api/v1/nodes")
    ready = sum(1 for n in nodes if n["state"] == "Ready")
    cordoned = sum(1 for n in nodes if n["cordoned"])
    gpus: dict[str, int] = {}
    for n in nodes:
        for g in n.get("gpus") or []:
            gpus[g["gpu_class"] or "?"] = gpus.get(g["gpu_class"] or "?", 0) + 1
    known_mem = [n["memory_total_bytes"] for n in nodes if n.get("memory_total_bytes") is not None]
    lines = [
        f"nodes     {len(nodes)} ({ready} Ready, {len(nodes) - ready} NotReady, {cordoned} cordoned)",
        f"cpus      {sum(n['cpus'] for n in nodes if n.get('cpus') is not None)}"
        + (
            f" ({sum(1 for n in nodes if n.get('cpus') is None)} nodes did not say)"
            if any(n.get("cpus") is None for n in nodes)
            else ""
        ),
        f"memory    {format_bytes(sum(known_mem)) if known_mem else DASH}",
        "gpus      " + (", ".join(f"{count}x{cls}" for cls, count in sorted(gpus.items())) or DASH),
    ]
    holders: dict[str, set[str]] = {}
    for n in nodes:
        for h in n.get("holdings") or []:
            holders.setdefault(h["model_name"], set()).add(n["name"])
    if holders:
        lines.append(
            "weights   "
            + ", ".join(f"{m} on {len(ns)} node(s)" for m, ns in sorted(holders.items()))
        )
    held = [m for m in api.call("GET", "/api/v1/models") if m["always_running"] or m["under_load"]]
    for m in held:
        lines += [f"held      {m['name']}", f"  weights: {fabric_weights(m['weights_by_fabric'])}"]
    return "\n".join(lines)


def node_names(names: list[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def fabric_weights(groups: list[dict[str, Any]]) -> str:
    """Per physical fabric, the nodes holding a model's weights: a
    multi-node replica forms inside one fabric, so "none of 8" says a
    replica there downloads first. Nodes on no known fabric are said as
    such, never counted on one."""
    parts = []
    for g in groups:
        holders = g["holders"]
        if g["fabric"] is None:
            parts.append(
                f"{g['label']}: {node_names(holders)}"
                if holders
                else f"{g['label']}: none of {g['nodes']}"
            )
        elif holders:
            parts.append(f"{g['label']} {len(holders)}/{g['nodes']} nodes ({node_names(holders)})")
        else:
            parts.append(f"{g['label']} none of {g['nodes']}")
    return ", ".join(parts) or f"{DASH} (no node)"


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("nodes", help="list nodes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_nodes)
    p = sub.add_parser("node", help="show one node")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_node)
    p = sub.add_parser("cordon", help="stop placing on a node")
    p.add_argument("name")
    p.add_argument("--reason", required=True)
    p.set_defaults(func=cmd_cordon)
    p = sub.add_parser("uncordon", help="place on a node again")
    p.add_argument("name")
    p.add_argument("--reason", default="")
    p.set_defaults(func=cmd_uncordon)
    p = sub.add_parser("label", help="set (key=value) or remove (key-) operator labels")
    p.add_argument("name")
    p.add_argument("labels", nargs="+")
    p.set_defaults(func=cmd_label)
    p = sub.add_parser("status", help="the fleet in a few lines")
    p.set_defaults(func=cmd_status)
