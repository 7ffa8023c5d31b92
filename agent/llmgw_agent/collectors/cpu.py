"""How busy the node's CPUs are: utilisation across all cores and load averages."""

from __future__ import annotations

import time
from typing import Any

import psutil

from .procfs import psutil_at
from .registry import Roots, collector


def _cpu_counters(roots: Roots) -> tuple[float, float]:
    """(total, idle) CPU seconds since boot over all cores, from psutil
    reading roots.proc. guest time is already inside user and nice, and
    iowait is idle: a CPU waiting on a disk could run something else."""
    with psutil_at(roots.proc):
        t = psutil.cpu_times()
    idle = t.idle + t.iowait
    busy = t.user + t.nice + t.system + t.irq + t.softirq + t.steal
    return busy + idle, idle


# Utilisation is computed here between two samples rather than with
# psutil.cpu_percent(): its first answer is 0.0, a number nobody measured.
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
