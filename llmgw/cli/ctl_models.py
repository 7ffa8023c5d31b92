"""`llmgw ctl` on models: list them, explain and place them, headroom,
held counts and declared resources."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmgw.cli.ctl_client import DASH, Api, CtlError, table
from llmgw.units import GiB, format_bytes


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


# Nodes sent a reason unless --all (the server names three): each reason says how many in all.
EXPLAIN_NODES = 3


def cmd_explain(api: Api, args: argparse.Namespace) -> str:
    most = "all" if args.all else str(EXPLAIN_NODES)
    data = api.get(f"/api/v1/models/{args.model}/explain", [("nodes", most)])
    if args.json:
        return json.dumps(data, indent=2)
    if args.all:
        # The server renders the explanation; --all prints its lines, a node a line.
        return "\n".join(data["lines"])
    # Each reason once, its nodes counted and the first few named, as the server groups them.
    return "\n".join(data["grouped"])


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


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("models", help="list models and their replicas")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser(
        "explain", help="where a model is placed and why every other node was refused"
    )
    p.add_argument("model")
    p.add_argument(
        "--all",
        action="store_true",
        help=f"every node refused on a line of its own (default: each reason once, "
        f"its nodes counted and {EXPLAIN_NODES} named)",
    )
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
