"""Memory in use and available."""

from __future__ import annotations

from typing import Any

from .procfs import meminfo
from .registry import Roots, collector


@collector("memory")
def collect_memory(roots: Roots) -> dict[str, Any]:
    info = meminfo(roots.proc)
    # MemAvailable is the kernel's own estimate (reclaimable cache included); MemFree would
    # make every node with a warm page cache look full.
    total, available = info["MemTotal"], info["MemAvailable"]
    return {"memory": {"used_bytes": total - available, "available_bytes": available}}
