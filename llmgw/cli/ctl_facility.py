"""`llmgw ctl facility`: every domain (site, room, row, rack, PDU, and held
or capped nodes) with its nodes, hold, power cap and draw; holding a domain
(optionally draining it) and releasing it."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from llmgw.cli.ctl_client import DASH, Api, table

HEADERS = ["DOMAIN", "NODES", "HOLD", "CAP", "DRAW", "MEASURED", "DERIVED", "DECLARED"]
SHOWN = 4


def kw(watts: float | None) -> str:
    return DASH if watts is None else f"{watts / 1000:.1f} kW"


def nodes_text(names: list[str]) -> str:
    if not names:
        return "0"
    more = ",..." if len(names) > SHOWN else ""
    return f"{len(names)}: {','.join(names[:SHOWN])}{more}"


def hold_text(hold: dict[str, Any] | None) -> str:
    if hold is None:
        return DASH
    reason: str = hold["reason"]
    if hold.get("drained"):
        return "held, drained: " + reason
    return ("draining: " if hold["drain"] else "held: ") + reason


def draw_text(row: dict[str, Any]) -> str:
    # The largest known per node, summed; nodes with no figure said, not counted as 0.
    if row["draw_w"] is None:
        return "unknown"
    unknown = row["unknown_nodes"]
    over = " OVER CAP" if row.get("over_cap_w") else ""
    return kw(row["draw_w"]) + (f" (+{unknown} unknown)" if unknown else "") + over


def cmd_facility(api: Api, args: argparse.Namespace) -> str:
    data = api.call("GET", "/api/v1/facility")
    if args.json:
        return json.dumps(data, indent=2)
    rows = [
        [
            r["domain"],
            nodes_text(r["nodes"]),
            hold_text(r["hold"]),
            kw(r["cap_w"]),
            draw_text(r),
            kw(r["measured_w"]),
            kw(r["derived_w"]),
            kw(r["declared_w"]),
        ]
        for r in data["domains"]
    ]
    if not rows:
        return "no domains: label nodes with llmgw.io/site, room, row, rack or pdu"
    lines = [table(HEADERS, rows)]
    for r in data["domains"]:
        if r.get("over_cap_w"):
            lines.append(
                f"{r['domain']}: over its cap: at {kw(r['draw_w'])} of its {kw(r['cap_w'])} cap "
                f"({kw(r['over_cap_w'])} over); nothing that adds to its draw is placed there"
            )
    for r in data["domains"]:
        hold = r["hold"]
        if hold and hold["drain"]:
            lines.append(f"{r['domain']}: {hold['progress'] or 'drain not started yet'}")
    return "\n".join(lines)


def cmd_hold(api: Api, args: argparse.Namespace) -> str:
    body = {"domain": args.domain, "reason": args.reason, "drain": args.drain}
    hold = api.call("POST", "/api/v1/facility/holds", body)
    then = (
        "its replicas move out one at a time"
        if hold["drain"]
        else "what runs there stays; add --drain to move it"
    )
    return f"{hold['domain']} held: {hold['reason']}; nothing new is placed there, {then}"


def cmd_release(api: Api, args: argparse.Namespace) -> str:
    done = api.call("DELETE", f"/api/v1/facility/holds/{quote(args.domain, safe='=')}")
    return f"{done['released']} released: placement may use it again"


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("facility", help="domains with their nodes, holds, power caps and draw")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_facility)
    actions = p.add_subparsers(dest="action")
    q = actions.add_parser("hold", help="place nothing new in a domain (--drain: move it out)")
    q.add_argument("domain", help="LEVEL=VALUE (site, room, row, rack, pdu) or a node's name")
    q.add_argument("--reason", required=True, help="why, shown wherever the hold bites")
    q.add_argument("--drain", action="store_true", help="move its replicas out, one at a time")
    q.set_defaults(func=cmd_hold)
    q = actions.add_parser("release", help="let placement use a held domain again")
    q.add_argument("domain")
    q.set_defaults(func=cmd_release)
