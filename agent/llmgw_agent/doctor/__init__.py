"""llmgw doctor: every check of this node, each with what was seen and what to do.

Each check is a pure function over what was read (`gather`) and, where it needs one, the
control plane's answer; `run_checks` puts them in order, `print_report` prints the table
(or JSON) and exits 1 when any check fails. NVLink's own problem list (`problems`) stays
importable for the control plane, which runs it on what nodes reported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..collectors import Roots
from .gather import (
    ControlPlane,
    Facts,
    ask_control_plane,
    read_engines,
    read_gpus,
    read_ib,
    read_room,
)
from .host import clock_skew, credential, engines, imex, nvlink_fabric, room
from .ib import ib_ports
from .nvlink import Problem, check_node, fabric_problems, imex_problems, problems
from .result import FAIL, OK, UNKNOWN, WARN, Check
from .sm import fabric_names, subnet_managers

if TYPE_CHECKING:
    from ..config import AgentConfig

__all__ = [
    "FAIL", "OK", "UNKNOWN", "WARN", "Check", "ControlPlane", "Facts", "Problem",
    "check_node", "fabric_problems", "gather", "imex_problems", "print_report", "problems",
    "run_checks",
]  # fmt: skip

DEFAULT_ENGINES_DIR = Path("/var/lib/llmgw-agent/engines")


def _record_error(cp: ControlPlane) -> str:
    if cp.status is None:
        return cp.said or "no answer"
    return f"control plane answered {cp.status}: {cp.said}" if cp.record is None else ""


def run_checks(f: Facts) -> list[Check]:
    cp = f.cp
    declared_of = {k: v for k, v in f.fabric_of.items()}
    wanted = [s["model"] for s in (cp.record or {}).get("shards") or [] if not s.get("model_path")]
    held_names = {m["name"] for m in f.held}
    return [
        ib_ports(f.ports, declared_of, f.ports_why, cp.record, _record_error(cp)),
        subnet_managers(f.ports, f.masters, cp.record, _record_error(cp)),
        fabric_names(f.ports, f.declared, f.fabric_of, f.masters, f.managers, cp.record),
        nvlink_fabric(f.gpus, f.gpus_why),
        imex(f.gpus, f.imex),
        engines(f.engines, f.engines_why, (cp.record or {}).get("engines")),
        room(f.filesystems, f.held, sorted({m for m in wanted if m not in held_names})),
        clock_skew(cp.offset_s, _record_error(cp) or cp.said, cp.rtt_s),
        credential(cp.status, f.node, cp.said, cp.have_credential),
    ]


def gather(roots: Roots, config: AgentConfig | None = None) -> Facts:
    """Read this node; ask the control plane when there is an agent.yaml to say where."""
    facts = Facts(node=config.node if config else "")
    read_ib(roots, facts)
    read_gpus(roots, facts)
    read_room(roots, facts)
    if config is None:
        read_engines(DEFAULT_ENGINES_DIR, [], facts)
        facts.cp = ControlPlane(said="no agent.yaml given (--config): no control plane to ask")
        return facts
    read_engines(config.engines_dir, [(e.name, e.path) for e in config.engines], facts)
    from ..client import read_credential

    facts.cp = ask_control_plane(
        config.urls, read_credential(config.credential_file), config.ca_file
    )
    return facts


def table(checks: Sequence[Check]) -> str:
    head = ("CHECK", "RESULT", "DETAIL", "WHAT TO DO")
    rows = [head, *((c.name, c.result.upper(), c.detail, c.action or "-") for c in checks)]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    lines = []
    for r in rows:
        lines.append(f"{r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}")
        if r is not head and r[3] != "-":
            lines.append(f"{'':<{w0}}  {'':<{w1}}  -> {r[3]}")
        elif r is head:
            lines.append(f"{'':<{w0}}  {'':<{w1}}  -> {r[3]}")
    return "\n".join(lines)


def print_report(roots: Roots, config: AgentConfig | None = None, as_json: bool = False) -> int:
    """Print every check; 1 when any check failed, else 0."""
    checks = run_checks(gather(roots, config))
    failed = any(c.result == FAIL for c in checks)
    if as_json:
        print(json.dumps({"node": config.node if config else None, "failed": failed,
                          "checks": [c.as_dict() for c in checks]}, indent=2))  # fmt: skip
    else:
        print(table(checks))
    return 1 if failed else 0
