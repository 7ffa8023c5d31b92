"""`llmgw ctl` on interconnects: physical fabrics and multi-node NVLink domains."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmgw.cli.ctl_client import DASH, Api, Outcome, table

# Named lines a kind of finding prints; the rest are counted.
PER_KIND = 20


def _cabling(f: dict[str, Any]) -> int:
    """The cabling problems (leaf-to-leaf cables, down uplinks) the fabric's
    last map shows; a map stored before they were counted shows none."""
    summary = (f.get("map") or {}).get("summary") or {}
    return int(summary.get("problems") or 0)


def _nodes(f: dict[str, Any]) -> str:
    """Its nodes, the NotReady ones said apart: a silent node is cabled to
    the fabric but nothing it last said about its ports is known now."""
    silent = len(f.get("not_ready_nodes") or ())
    return f"{len(f['nodes'])} ({silent} NotReady)" if silent else str(len(f["nodes"]))


def _findings(f: dict[str, Any]) -> list[str]:
    """Each port down and each thing the map found, by name: its switch,
    port and node. A map stored before findings were kept beside it has
    only counts, and says where the detail is."""
    down = f.get("down_port_names") or []
    out = [f"port down: {name}" for name in down[:PER_KIND]]
    if len(down) > PER_KIND:
        out.append(f"and {len(down) - PER_KIND} more port(s) down")
    summary = (f.get("map") or {}).get("summary") or {}
    found = summary.get("findings")
    if found is None:
        counted = {
            "degraded link(s)": summary.get("degraded_links"),
            "adapter(s) off their rail": summary.get("misaligned_rails"),
            "cabling problem(s)": summary.get("problems"),
        }
        said = ", ".join(f"{n} {what}" for what, n in counted.items() if n)
        if said:
            out.append(f"{said} on the map: the console's fabric page names them")
        return out
    out += [line["message"] for line in found["lines"]]
    out += [f"and {n} more {kind.replace('_', ' ')}(s)" for kind, n in found["left_out"].items()]
    return out


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
                _nodes(f),
                # The subnet managers' problems by code, then the map's
                # cabling problems by count: only the map holds their detail.
                ",".join(
                    [p["code"] for p in f["problems"]]
                    + ([f"cabling:{_cabling(f)}"] if _cabling(f) else [])
                )
                or DASH,
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
        if f.get("not_ready_nodes"):
            lines.append(
                f"{f['identity']}: {f['not_ready_ports']} port(s) on NotReady node(s), "
                f"counted neither up nor down: {', '.join(f['not_ready_nodes'])}"
            )
        lines += [f"{f['identity']}: {line}" for line in _findings(f)]
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


def _gbps(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f} Gb/s"


def _expected(rail: dict[str, Any]) -> str:
    # A down port reports a placeholder rate (10 Gb/s): no rate to expect.
    if rail.get("down"):
        return f"down ({rail['down']})"
    return _gbps(rail["expected_gbps"])


def cmd_fabric_test(api: Api, args: argparse.Namespace) -> str:
    """One row a rail; the request waits while the rails run one after
    another. Exits 1 when any rail is not ok, so a script can tell."""
    # Each rail takes its duration plus the agents' setup; the default 30 s is too short.
    api.timeout = args.wait
    body = {"a": args.a, "b": args.b, "duration_s": args.duration, "size": args.size}
    data = api.call("POST", "/api/v1/fabrics/test", body)
    status = 0 if all(r["grade"] == "ok" for r in data["rails"]) else 1
    if args.json:
        return Outcome(json.dumps(data, indent=2), status)
    rows = [
        [
            r["rail"],
            f"{r['a_device']}/{r['a_port']}",
            f"{r['b_device']}/{r['b_port']}",
            _expected(r),
            _gbps(r["measured_gbps"]),
            r["grade"],
        ]
        for r in data["rails"]
    ]
    headers = ["RAIL", "A ADAPTER", "B ADAPTER", "EXPECTED", "MEASURED", "GRADE"]
    lines = [f"{data['a']} (A, client) -> {data['b']} (B, server): ib_write_bw, "
             f"{data['duration_s']} s a rail, {data['size']} B messages", table(headers, rows)]  # fmt: skip
    for r in data["rails"]:
        lines += [f"rail {r['rail']}: {text}" for text in (r["detail"], r.get("note")) if text]
    if data["simulated"]:
        lines.append("simulated: these nodes are simulated and so are their numbers")
    if status:
        bad = [r["rail"] for r in data["rails"] if r["grade"] != "ok"]
        lines.append(f"not ok: rail {', '.join(bad)} (exit status 1)")
    return Outcome("\n".join(lines), status)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "fabrics", help="physical fabrics, their subnet managers, problems and warnings"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fabrics)
    p = sub.add_parser("nvlink", help="multi-node NVLink domains and what keeps trays out")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_nvlink)
    p = sub.add_parser(
        "fabric-test",
        help="ib_write_bw between two nodes rail by rail, through their agents, graded; "
        "exits 1 when any rail is not ok",
    )
    p.add_argument("a", help="the node running the client")
    p.add_argument("b", help="the node running the server")
    p.add_argument("--duration", type=int, default=5, help="seconds a rail (1-20)")
    p.add_argument("--size", type=int, default=65536, help="message size in bytes")
    p.add_argument("--wait", type=float, default=900.0, help="seconds to wait for all rails")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fabric_test)
