"""`llmgw ctl` on nodes: list, show, cordon, label, and the fleet in a few lines."""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llmgw.cli import ctl_node
from llmgw.cli.ctl_client import DASH, Api, CtlError, table
from llmgw.locations import LABEL_PREFIX, location
from llmgw.locations import TREE as LOCATION_LEVELS
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


def location_text(labels: dict[str, str]) -> str:
    """site/room/row/rack:pdu, "-" when the labels say nothing (llmgw.locations)."""
    return location(labels) or DASH


def gpus_text(node: dict[str, Any]) -> str:
    """8xH100-80GB; a node with cards of two classes lists both."""
    classes = node.get("gpu_classes")
    if classes is None:  # a full node record: count its cards
        classes = {}
        for g in node.get("gpus") or []:
            classes[g["gpu_class"]] = classes.get(g["gpu_class"], 0) + 1
    return ",".join(f"{n}x{cls or '?'}" for cls, n in sorted(classes.items())) or DASH


def node_row(node: dict[str, Any]) -> list[str]:
    state = node["state"] + (",Cordoned" if node["cordoned"] else "")
    all_labels = node.get("labels") or {}
    location = {LABEL_PREFIX + level for level in (*LOCATION_LEVELS, "pdu")}
    labels = (
        ",".join(f"{k}={v}" for k, v in sorted(all_labels.items()) if k not in location) or DASH
    )
    cpus = DASH if node.get("cpus") is None else str(node["cpus"])
    return [
        node["name"],
        state,
        cpus,
        format_bytes(node.get("memory_total_bytes")),
        disk_text(node.get("disk_local")),
        gpus_text(node),
        location_text(all_labels),
        labels,
    ]


NODE_HEADERS = ["NAME", "STATE", "CPUS", "MEM", "DISK", "GPUS", "LOCATION", "LABELS"]
# What the table and its notes read: the list answers only these.
NODE_FIELDS = [
    "name",
    "state",
    "cordoned",
    "cpus",
    "memory_total_bytes",
    "disk_local",
    "gpu_classes",
    "labels",
    "engines",
    "warnings",
]
PAGE = 1000
FETCHERS = 4


def engine_lines(node: dict[str, Any]) -> list[str]:
    """The node's own words for engines not installed, and its warnings."""
    lines = [
        f"{node['name']}: {e['name']} {e.get('version') or ''}: {e['status']}: {e.get('message') or ''}".rstrip()
        for e in node.get("engines") or []
        if e.get("status") != "installed"
    ]
    lines += [f"{node['name']}: warning: {w}" for w in node.get("warnings") or []]
    return lines


def node_filters(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The list's filters as query parameters, each repeated flag once."""
    params = [("state", v) for v in args.state or []]
    params += [("class", v) for v in args.gpu_class or []]
    params += [("domain", v) for v in args.domain or []]
    if args.search:
        params.append(("search", args.search))
    return params


def list_nodes(
    api: Api, params: list[tuple[str, str]], most: int | None, fields: list[str] | None
) -> tuple[list[dict[str, Any]], int]:
    """The nodes the filters pick (at most `most`), and how many there are
    in all. The first page says how many; the rest are asked for together,
    FETCHERS at a time: five pages one after another were five waits on a
    web process that 5,000 beating nodes keep busy."""
    base = params + ([("fields", ",".join(fields))] if fields else [])

    def page(offset: int, limit: int) -> dict[str, Any]:
        got: dict[str, Any] = api.get(
            "/api/v1/nodes", [*base, ("limit", str(limit)), ("offset", str(offset))]
        )
        return got

    first = page(0, PAGE if most is None else min(PAGE, most))
    nodes, count = list(first["results"]), first["count"]
    wanted = count if most is None else min(count, most)
    # The server's page may be shorter than asked for: its size is the step.
    step = len(nodes)
    if first["next"] is None or not step or step >= wanted:
        return nodes, count
    offsets = range(step, wanted, step)
    with ThreadPoolExecutor(FETCHERS) as pool:
        rest = pool.map(lambda offset: page(offset, min(step, wanted - offset)), offsets)
        for more in rest:
            nodes += more["results"]
    return nodes, count


def cmd_nodes(api: Api, args: argparse.Namespace) -> str:
    fields = None if args.json else NODE_FIELDS
    nodes, count = list_nodes(api, node_filters(args), args.limit, fields)
    if args.json:
        return json.dumps(nodes, indent=2)
    notes = [line for n in nodes for line in engine_lines(n)]
    if len(nodes) < count:
        notes.append(f"{len(nodes)} of {count} nodes shown (--limit)")
    if not nodes:
        return "no nodes" + (" match" if node_filters(args) else "")
    return table(NODE_HEADERS, [node_row(n) for n in nodes]) + (
        "\n\n" + "\n".join(notes) if notes else ""
    )


def cmd_node(api: Api, args: argparse.Namespace) -> str:
    node = api.call("GET", f"/api/v1/nodes/{args.name}")
    if args.json:
        return json.dumps(node, indent=2)
    now = api.server_date
    lines = [table(NODE_HEADERS, [node_row(node)]), ""]
    if node["cordoned"]:
        lines.append(ctl_node.cordon_line(node))
    lines.append(ctl_node.heartbeat_line(node, now))
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
    lines += ctl_node.sections(api, node)
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
    # Counted by the server: the fleet's totals without fetching every node.
    s = api.get("/api/v1/nodes/summary", node_filters(args))
    unknown = s["cpus_unknown"]
    lines = [
        f"nodes     {s['nodes']} ({s['ready']} Ready, {s['not_ready']} NotReady, "
        f"{s['cordoned']} cordoned)",
        f"cpus      {s['cpus'] if s['cpus'] is not None else DASH}"
        + (f" ({unknown} nodes did not say)" if unknown else ""),
        f"memory    {format_bytes(s['memory_total_bytes'])}"
        + (f" ({s['memory_unknown']} nodes did not say)" if s["memory_unknown"] else ""),
        "gpus      " + (", ".join(gpu_count(g) for g in s["gpus"]) or DASH),
    ]
    if s["weights"]:
        lines.append(
            "weights   " + ", ".join(f"{w['model']} on {w['nodes']} node(s)" for w in s["weights"])
        )
    # The same filters: a rack's status counts the rack's nodes holding weights.
    models = api.call("GET", "/api/v1/models", params=node_filters(args) or None)
    held = [m for m in models if m["always_running"] or m["under_load"]]
    within = (
        f" (within {', '.join(v for _, v in node_filters(args))})" if node_filters(args) else ""
    )
    for m in held:
        lines += [
            f"held      {m['name']}  {held_counts(m)}",
            f"  weights{within}: {fabric_weights(m['weights_by_fabric'])}",
        ]
    return "\n".join(lines)


def held_counts(model: dict[str, Any]) -> str:
    """Replicas ready against the held counts: always_running is the floor
    the reconciler keeps, under_load what it may grow to under load. The
    model's replicas, wherever they run (filters pick nodes, not replicas)."""
    ready = sum(1 for r in model["replicas"] if r["state"] == "ready")
    always, under = model["always_running"], model["under_load"]
    return f"{ready}/{always} ready (always_running {always}, under_load {under})"


def gpu_count(g: dict[str, Any]) -> str:
    """A class's cards; those on NotReady nodes said apart, as the node
    count says them (a silent node's cards may be gone with it)."""
    name = g["gpu_class"] or "?"
    if not g.get("not_ready"):
        return f"{g['count']}x{name}"
    return f"{g['ready']}x{name} Ready + {g['not_ready']} NotReady"


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
    p = sub.add_parser("nodes", help="list nodes (filtered by the server)")
    add_filters(p)
    p.add_argument("--limit", type=positive, help="list at most this many")
    p.add_argument("--json", action="store_true", help="every field of each node")
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
    add_filters(p)
    p.set_defaults(func=cmd_status)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number from 1, not {text!r}")
    return int(text)


def add_filters(p: argparse.ArgumentParser) -> None:
    """Filters the server applies; a flag given twice means either value."""
    p.add_argument("--state", action="append", metavar="STATE", help="Ready, NotReady or Cordoned")
    p.add_argument(
        "--domain",
        action="append",
        metavar="LEVEL=VALUE",
        help="LEVEL one of site, room, row, rack, pdu (labels llmgw.io/LEVEL), or a node name",
    )
    p.add_argument(
        "--class", dest="gpu_class", action="append", metavar="CLASS", help="GPU class: H100-80GB"
    )
    p.add_argument("--search", metavar="TEXT", help="part of the node's name")
