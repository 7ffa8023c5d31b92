"""`llmgw ctl`: the REST API from a terminal, anywhere.

The URL and token come from LLMGW_URL and LLMGW_TOKEN, else from the
config file (LLMGW_CONFIG, default ~/.config/llmgw/cli.yaml) with `url:`
and `token:`. No Django here: this runs on an operator's laptop.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from llmgw.units import GiB, format_bytes, format_bytes_pair

DASH = "-"


class CtlError(Exception):
    pass


def config() -> tuple[str, str]:
    url, token = os.environ.get("LLMGW_URL"), os.environ.get("LLMGW_TOKEN")
    path = Path(os.environ.get("LLMGW_CONFIG", Path.home() / ".config" / "llmgw" / "cli.yaml"))
    if (not url or not token) and path.exists():
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise CtlError(f"{path}: expected url: and token: keys")
        url, token = url or data.get("url"), token or data.get("token")
    if not url or not token:
        raise CtlError(f"set LLMGW_URL and LLMGW_TOKEN, or write url: and token: to {path}")
    return str(url).rstrip("/"), str(token)


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Token {token}"}, timeout=30
        )

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        accept: tuple[int, ...] = (),
    ) -> Any:
        try:
            response = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise CtlError(f"cannot reach {self.client.base_url}: {exc}") from None
        if response.status_code >= 400 and response.status_code not in accept:
            if response.status_code == 409 and "explanation" in response.text:
                data = response.json()
                text = "\n".join((data.get("explanation") or {}).get("lines") or [])
                raise CtlError(f"refused: {data['detail']}" + (f"\n{text}" if text else ""))
            try:
                detail = response.json()
            except ValueError:
                detail = response.text.strip()
            raise CtlError(f"{method} {path}: HTTP {response.status_code}: {_words(detail)}")
        return response.json()


def _words(detail: Any) -> str:
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        return str(detail["detail"])
    return json.dumps(detail) if not isinstance(detail, str) else detail


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


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


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
    return "\n".join(lines)


def cmd_models(api: Api, args: argparse.Namespace) -> str:
    models = api.call("GET", "/api/v1/models")
    rows = []
    for m in models:
        ready = sum(1 for r in m["replicas"] if r["state"] == "ready")
        profiles = ",".join(p["name"] for p in m["profiles"]) or DASH
        rows.append(
            [
                m["name"],
                f"{ready}/{len(m['replicas'])}",
                str(m["always_running"]),
                str(m["under_load"]),
                profiles,
            ]
        )
    return table(["MODEL", "READY/REPLICAS", "ALWAYS", "UNDER_LOAD", "PROFILES"], rows)


def cmd_explain(api: Api, args: argparse.Namespace) -> str:
    data = api.call("GET", f"/api/v1/models/{args.model}/explain")
    # The server renders the explanation; every surface prints its lines.
    return json.dumps(data, indent=2) if args.json else "\n".join(data["lines"])


def cmd_headroom(api: Api, args: argparse.Namespace) -> str:
    data = api.call("GET", f"/api/v1/models/{args.model}/headroom")
    return table(
        ["PROFILE", "MORE_REPLICAS_FIT"], [[p, str(n)] for p, n in data["headroom"].items()]
    )


def cmd_place(api: Api, args: argparse.Namespace) -> str:
    data = api.call("POST", f"/api/v1/models/{args.model}/place", accept=(409,))
    text = "\n".join(data["lines"])
    if not data["placed"]:
        raise CtlError(text)
    # The replica is held (always_running counts it): say so, and how to undo.
    return f"{text}\nreplica #{data['replica']}: {data['held']}"


def profile_memory(profile: dict[str, Any]) -> str:
    # The catalog's memory_gb is in GiB.
    gb = profile.get("memory_gb")
    return format_bytes(None if gb is None else gb * GiB)


def cmd_model(api: Api, args: argparse.Namespace) -> str:
    if args.action == "resources":
        body = {"memory_gb": args.memory_gb, "cpu_cores": args.cpu_cores, "profile": args.profile}
        model = api.call("POST", f"/api/v1/models/{args.model}/resources", body)
        return "\n".join(
            f"{model['name']}/{p['name']}: memory {profile_memory(p)}, {p['cpu_cores']} cores"
            for p in model["profiles"]
        )
    body = {
        k: v
        for k, v in (("always_running", args.always_running), ("under_load", args.under_load))
        if v is not None
    }
    model = api.call("PATCH", f"/api/v1/models/{args.model}", body)
    return f"{model['name']}: always_running {model['always_running']}, under_load {model['under_load']}"


def cmd_fabrics(api: Api, args: argparse.Namespace) -> str:
    data = api.call("GET", "/api/v1/fabrics")
    if args.json:
        return json.dumps(data, indent=2)
    rows = []
    for f in data["fabrics"]:
        master = f["master"]["guid"] if f.get("master") else DASH
        standbys = [
            m["guid"] for m in f["subnet_managers"] if not m["master"] and m["state"] != "GONE"
        ]
        rows.append(
            [
                f["identity"],
                f["kind"],
                ",".join(f["names"]) or DASH,
                master,
                ",".join(standbys) or DASH,
                f"{f['active_ports']}/{f['ports']}",
                str(f["down_ports"]),
                str(len(f["nodes"])),
                ",".join(p["code"] for p in f["problems"]) or DASH,
            ]
        )
    lines = [
        table(
            [
                "FABRIC",
                "KIND",
                "NAMES",
                "MASTER",
                "STANDBYS",
                "UP/PORTS",
                "DOWN",
                "NODES",
                "PROBLEMS",
            ],
            rows,
        )
    ]
    for f in data["fabrics"]:
        lines += [f"{f['identity']}: {p['message']}" for p in f["problems"]]
        lines += [
            f"{f['identity']}: master {c['from'] or DASH} -> {c['to']} at {c['at']} (seen by {c['reported_by']})"
            for c in f["master_changes"]
        ]
    lines += [f"warning: {w['message']}" for w in data["warnings"]]
    return "\n".join(lines)


def cmd_nvlink(api: Api, args: argparse.Namespace) -> str:
    data = api.call("GET", "/api/v1/nvlink")
    if args.json:
        return json.dumps(data, indent=2)
    if not data["domains"]:
        return "no multi-node NVLink domains"
    lines = []
    for d in data["domains"]:
        lines.append(
            f"domain {d['id']}: {d['joined_trays']}/{len(d['trays'])} trays joined, "
            f"{d['joined_gpus']}/{d['gpus']} GPUs"
        )
        for t in d["trays"]:
            if not t["joined"]:
                lines.append(f"  {t['node']} held out: " + "; ".join(t["held_out_because"]))
    return "\n".join(lines)


def key_row(key: dict[str, Any]) -> list[str]:
    scope = "*" if key["all_models"] else ",".join(key["models"]) or DASH
    state = "revoked" if key["revoked_at"] else "active"
    return [
        key["name"],
        key["prefix"] + "...",
        state,
        scope,
        key.get("owner") or DASH,
        key["created_at"],
        key.get("last_used_at") or DASH,
    ]


KEY_HEADERS = ["NAME", "PREFIX", "STATE", "MODELS", "OWNER", "CREATED", "LAST_USED"]


def cmd_keys(api: Api, args: argparse.Namespace) -> str:
    if args.action == "create":
        models = [m.strip() for m in (args.models or "").split(",") if m.strip()]
        body = {"name": args.name, "models": models, "all_models": args.all_models}
        key = api.call("POST", "/api/v1/keys", body)
        return "\n".join(
            [
                table(KEY_HEADERS, [key_row(key)]),
                "",
                "The key, shown this once (only its SHA-256 is kept):",
                key["key"],
            ]
        )
    if args.action == "revoke":
        key = api.call("POST", f"/api/v1/keys/{args.name}/revoke")
        return f"{key['name']} ({key['prefix']}...) revoked at {key['revoked_at']}; the gateway refuses it within seconds"
    keys = api.call("GET", "/api/v1/keys")
    if args.json:
        return json.dumps(keys, indent=2)
    return table(KEY_HEADERS, [key_row(k) for k in keys])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmgw ctl", description="llmgw REST API client")
    sub = parser.add_subparsers(dest="command", required=True)
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
    p = sub.add_parser("models", help="list models and their replicas")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser(
        "explain", help="where a model is placed and why every other node was refused"
    )
    p.add_argument("model")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("headroom", help="how many more replicas of each profile fit")
    p.add_argument("model")
    p.set_defaults(func=cmd_headroom)
    p = sub.add_parser("place", help="place one more replica of a model now")
    p.add_argument("model")
    p.set_defaults(func=cmd_place)
    p = sub.add_parser("model", help="change a stored model")
    model_sub = p.add_subparsers(dest="action", required=True)
    q = model_sub.add_parser("resources", help="set the declared memory and cores")
    q.add_argument("model")
    q.add_argument("--memory-gb", type=float, help="in GiB")
    q.add_argument("--cpu-cores", type=int)
    q.add_argument("--profile", help="only this profile (default: all of the model's)")
    q.set_defaults(func=cmd_model)
    q = model_sub.add_parser("scale", help="set the held counts")
    q.add_argument("model")
    q.add_argument("--always-running", type=int)
    q.add_argument("--under-load", type=int)
    q.set_defaults(func=cmd_model)
    p = sub.add_parser(
        "fabrics", help="physical fabrics, their subnet managers, problems and warnings"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fabrics)
    p = sub.add_parser("nvlink", help="multi-node NVLink domains and what keeps trays out")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_nvlink)
    p = sub.add_parser("keys", help="the gateway's API keys")
    keys_sub = p.add_subparsers(dest="action", required=True)
    q = keys_sub.add_parser("create", help="make a key; it is printed once")
    q.add_argument("name")
    scope = q.add_mutually_exclusive_group(required=True)
    scope.add_argument("--models", help="comma-separated model names the key may use")
    scope.add_argument("--all-models", action="store_true", help="every model, present and future")
    q.set_defaults(func=cmd_keys)
    q = keys_sub.add_parser("list", help="list keys (never the keys themselves)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_keys)
    q = keys_sub.add_parser("revoke", help="refuse a key from now on")
    q.add_argument("name", help="the active key's name, or its id")
    q.set_defaults(func=cmd_keys)
    p = sub.add_parser("status", help="the fleet in a few lines")
    p.set_defaults(func=cmd_status)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        url, token = config()
        print(args.func(Api(url, token), args))
    except CtlError as exc:
        print(f"llmgw ctl: {exc}", file=sys.stderr)
        return 1
    return 0
