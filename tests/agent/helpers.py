"""Helpers shared by the agent tests (fixtures live in conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw_agent.collectors import Roots

FIXTURES = Path(__file__).parent / "fixtures"
HOST = FIXTURES / "host"


@dataclass
class FakeStatfs:
    f_bavail: int
    f_blocks: int
    f_frsize: int = 4096


def host_roots(**kw: Any) -> Roots:
    """Roots over the recorded host tree; no waiting for a second CPU sample."""
    kw.setdefault("cpu_first_sample_s", 0)
    return Roots(proc=HOST / "proc", sys=HOST / "sys", rootfs=HOST / "root", **kw)


def write_mountinfo(path: Path, mounts: list[tuple[str, str, str, str]]) -> Path:
    """mounts: (major:minor, mountpoint, fstype, source), in mountinfo's own format."""
    lines = ["1 0 254:0 / / rw,relatime - ext4 /dev/vda rw"]
    for i, (dev, point, fstype, source) in enumerate(mounts, start=2):
        point = point.replace(" ", "\\040")
        lines.append(f"{i} 1 {dev} / {point} rw,relatime shared:{i} - {fstype} {source} rw")
    path.write_text("\n".join(lines) + "\n")
    return path
