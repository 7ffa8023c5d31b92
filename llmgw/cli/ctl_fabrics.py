"""`llmgw ctl` on interconnects: physical fabrics and multi-node NVLink domains."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmgw.cli.ctl_client import DASH, Api, table


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


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "fabrics", help="physical fabrics, their subnet managers, problems and warnings"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fabrics)
    p = sub.add_parser("nvlink", help="multi-node NVLink domains and what keeps trays out")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_nvlink)
