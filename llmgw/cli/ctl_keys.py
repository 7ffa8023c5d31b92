"""`llmgw ctl keys`: the gateway's API keys, their limits and usage."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmgw.cli.ctl_client import DASH, Api, CtlError, table

LIMITS = {
    "rpm": "requests_per_minute",
    "tpm": "tokens_per_minute",
    "concurrency": "max_concurrent_requests",
}


def _limit(value: Any) -> str:
    return "-" if value is None else str(value)


def key_row(key: dict[str, Any]) -> list[str]:
    scope = "*" if key["all_models"] else ",".join(key["models"]) or DASH
    state = "revoked" if key["revoked_at"] else "active"
    usage = key.get("usage") or {}
    return [
        key["name"],
        key["prefix"] + "...",
        state,
        scope,
        key.get("owner") or DASH,
        *(_limit(key.get(field)) for field in LIMITS.values()),
        str(usage.get("requests", DASH)),
        str(usage.get("prompt_tokens", DASH)),
        str(usage.get("completion_tokens", DASH)),
        key["created_at"],
        key.get("last_used_at") or DASH,
    ]


# RPM, TPM, CONCURRENCY: "-" is no limit. REQUESTS and the tokens: since the
# key was made, as the gateway last saved them (seconds behind).
KEY_HEADERS = [
    "NAME",
    "PREFIX",
    "STATE",
    "MODELS",
    "OWNER",
    "RPM",
    "TPM",
    "CONCURRENCY",
    "REQUESTS",
    "PROMPT_TOKENS",
    "COMPLETION_TOKENS",
    "CREATED",
    "LAST_USED",
]
USAGE_HEADERS = ["NAME", "MODEL", "REQUESTS", "PROMPT_TOKENS", "COMPLETION_TOKENS"]


def _limits(args: argparse.Namespace) -> dict[str, int | None]:
    """The limits named on the command line; "none" lifts one."""
    return {
        field: None if getattr(args, flag) == "none" else int(getattr(args, flag))
        for flag, field in LIMITS.items()
        if getattr(args, flag) is not None
    }


def _usage(keys: list[dict[str, Any]]) -> str:
    rows = [
        [k["name"], model, str(u["requests"]), str(u["prompt_tokens"]), str(u["completion_tokens"])]
        for k in keys
        for model, u in sorted(k["usage"]["models"].items())
    ]
    return table(USAGE_HEADERS, rows) if rows else "no usage yet"


def cmd_keys(api: Api, args: argparse.Namespace) -> str:
    if args.action == "create":
        models = [m.strip() for m in (args.models or "").split(",") if m.strip()]
        body = {"name": args.name, "models": models, "all_models": args.all_models, **_limits(args)}
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
    if args.action == "limit":
        limits = _limits(args)
        if not limits:
            raise CtlError("name a limit to set: --rpm, --tpm or --concurrency (N, or none)")
        key = api.call("PATCH", f"/api/v1/keys/{args.name}", limits)
        return table(KEY_HEADERS, [key_row(key)])
    if args.action == "usage":
        path = f"/api/v1/keys/{args.name}" if args.name else "/api/v1/keys"
        found = api.call("GET", path)
        return _usage([found] if args.name else found)
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
    _limit_flags(q, "no limit")
    q.set_defaults(func=cmd_keys)
    q = keys_sub.add_parser("limit", help="set or lift a key's limits (the others stay)")
    q.add_argument("name", help="the active key's name, or its id")
    _limit_flags(q, "unchanged")
    q.set_defaults(func=cmd_keys)
    q = keys_sub.add_parser("usage", help="requests and tokens per key and model")
    q.add_argument("name", nargs="?", help="one key (its name or id); every key by default")
    q.set_defaults(func=cmd_keys)
    q = keys_sub.add_parser("list", help="list keys (never the keys themselves)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_keys)
    q = keys_sub.add_parser("revoke", help="refuse a key from now on")
    q.add_argument("name", help="the active key's name, or its id")
    q.set_defaults(func=cmd_keys)


def _limit_value(text: str) -> str:
    if text == "none" or (text.isascii() and text.isdigit() and 1 <= int(text) <= 2_147_483_647):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: a whole number from 1, or none for no limit")


def _limit_flags(parser: Any, absent: str) -> None:
    for flag, what in (
        ("rpm", "requests per minute"),
        ("tpm", "prompt and completion tokens per minute"),
        ("concurrency", "requests in flight at once"),
    ):
        parser.add_argument(
            f"--{flag}", type=_limit_value, help=f"{what}; 'none' for no limit (default: {absent})"
        )
