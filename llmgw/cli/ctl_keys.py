"""`llmgw ctl keys`: the gateway's API keys."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmgw.cli.ctl_client import DASH, Api, table


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


def add_parsers(sub: Any) -> None:
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
