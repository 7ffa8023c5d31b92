"""nvidia-imex: the daemon that lets a multi-node NVLink domain's GPUs share memory.

`nvidia-imex-ctl -N` lists the domain's nodes and ends with "Domain State: UP"; a
process needs an IMEX channel (/dev/nvidia-caps-imex-channels/channelN) to use it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from .gpu_nvml import due
from .registry import Roots, collector

# "Node #0   - 172.31.48.81    - READY                - Version: 570.172"
_NODE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+([A-Z_]+)")
_DOMAIN = re.compile(r"^Domain State:\s*(\S+)", re.MULTILINE)
_NOT_FOUND = ("not found", "No such file")


def parse_imex_nodes(output: str) -> dict[str, Any]:
    """{"up", "domain_state", "nodes": [{"index", "address", "status"}]}."""
    nodes = [
        {"index": int(m.group(1)), "address": m.group(2), "status": m.group(3).lower()}
        for m in (_NODE.match(line.strip()) for line in output.splitlines())
        if m
    ]
    state = _DOMAIN.search(output)
    domain_state = state.group(1).lower() if state else None
    return {"up": domain_state == "up", "domain_state": domain_state, "nodes": nodes}


def imex_channels(rootfs: Path) -> int:
    """Channel devices under <rootfs>/dev/nvidia-caps-imex-channels/ (none: 0)."""
    try:
        return sum(1 for p in (rootfs / "dev" / "nvidia-caps-imex-channels").iterdir()
                   if p.name.startswith("channel"))  # fmt: skip
    except OSError:
        return 0


def read_imex(roots: Roots) -> dict[str, Any] | None:
    """The node's IMEX status, or None when nvidia-imex-ctl is not installed."""
    try:
        done = roots.run(["nvidia-imex-ctl", "-N"])
    except FileNotFoundError:
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return {"up": False, "nodes": [], "error": f"{type(exc).__name__}: {exc}"[:300],
                "channels": imex_channels(roots.rootfs)}  # fmt: skip
    said = done.stdout + done.stderr
    if done.returncode != 0 and "Nodes:" not in said:
        # Through a wrapper (sudo -n, nsenter) a missing binary is an exit status.
        if done.returncode == 127 or any(s in said for s in _NOT_FOUND):
            return None
        status = parse_imex_nodes(said)
        status["error"] = said.strip()[-300:] or f"exit status {done.returncode}"
    else:
        status = parse_imex_nodes(said)
    status["channels"] = imex_channels(roots.rootfs)
    return status


@collector("imex")
def collect_imex(roots: Roots) -> dict[str, Any]:
    """Once a minute: a fabric manager or IMEX restart drops a whole rack at once."""
    if not due(roots, "imex.at", 60):
        return {}
    status = read_imex(roots)
    return {"imex": status} if status is not None else {}
