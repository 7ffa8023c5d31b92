"""`llmgw ctl whatif`: if a domain failed now, could every held replica be
placed again? And where would a model not in the catalog yet go? The
server dry-runs placement and renders the answer; this prints its lines."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from llmgw.cli.ctl_client import Api, CtlError


def _print(data: dict[str, Any], as_json: bool) -> str:
    return json.dumps(data, indent=2) if as_json else "\n".join(data["lines"])


def cmd_fail(api: Api, args: argparse.Namespace) -> str:
    data = api.call("GET", "/api/v1/whatif?" + urlencode({"fail": args.domain}))
    return _print(data, args.json)


def cmd_sweep(api: Api, args: argparse.Namespace) -> str:
    data = api.call("GET", "/api/v1/whatif/sweep?" + urlencode({"levels": args.levels}))
    return _print(data, args.json)


def cmd_place(api: Api, args: argparse.Namespace) -> str:
    try:
        text = Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CtlError(f"{args.file}: {getattr(exc, 'strerror', None) or exc}") from None
    data = api.call("POST", "/api/v1/whatif", {"yaml": text})
    return _print(data, args.json)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("whatif", help="dry-run a failure, a sweep of them, or a new model")
    whatif_sub = p.add_subparsers(dest="action", required=True)
    q = whatif_sub.add_parser(
        "fail", help="which held replicas a domain's failure loses, and where each would go"
    )
    q.add_argument("domain", help="LEVEL=VALUE (site, room, row, rack, pdu) or a node's name")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_fail)
    q = whatif_sub.add_parser(
        "sweep", help="fail every rack and PDU in turn; list those that would hurt a held model"
    )
    q.add_argument("--levels", default="rack,pdu", help="comma-separated (default rack,pdu)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_sweep)
    q = whatif_sub.add_parser(
        "place", help="where a model in a catalog file (models:) would go, before applying it"
    )
    q.add_argument("file")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_place)
