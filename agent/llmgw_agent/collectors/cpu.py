"""How busy the node's CPUs are: utilisation across all cores and load averages."""

from __future__ import annotations

import time
from typing import Any

from .registry import Roots, collector

# /proc/stat's aggregate line: user nice system idle iowait irq softirq steal guest guest_nice.
# guest and guest_nice are already counted inside user and nice, so they are left out.
_BUSY_FIELDS = 8
_IDLE, _IOWAIT = 3, 4


def _cpu_counters(roots: Roots) -> tuple[int, int]:
    """(total, idle) jiffies since boot, over all cores."""
    for line in (roots.proc / "stat").read_text(encoding="ascii").splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1 : 1 + _BUSY_FIELDS]]
            idle = values[_IDLE] + (values[_IOWAIT] if len(values) > _IOWAIT else 0)
            return sum(values), idle
    raise ValueError(f"no aggregate cpu line in {roots.proc / 'stat'}")


# Read /proc/stat directly rather than through psutil: psutil.PROCFS_PATH is process-global,
# so pointing it at one Roots would leak into every other caller, and its first
# cpu_percent() answers 0.0, a number nobody measured.
@collector("cpu")
def collect_cpu(roots: Roots) -> dict[str, Any]:
    previous = roots.memo.get("cpu.counters")
    current = _cpu_counters(roots)
    if previous is None and roots.cpu_first_sample_s > 0:
        previous = current
        time.sleep(roots.cpu_first_sample_s)
        current = _cpu_counters(roots)
    roots.memo["cpu.counters"] = current
    utilization: float | None = None
    if previous is not None:
        total, idle = current[0] - previous[0], current[1] - previous[1]
        # No ticks elapsed (or counters reset): unknown, never 0.
        if total > 0 and idle >= 0:
            utilization = round(100.0 * (total - idle) / total, 2)
    load = (roots.proc / "loadavg").read_text(encoding="ascii").split()[:3]
    return {"cpu": {"utilization_percent": utilization, "load": [float(x) for x in load]}}
