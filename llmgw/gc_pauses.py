"""Python's garbage collector in a long-lived process of the control plane.

A web process keeps its copy of the fleet, the gateway's routes and its
share of the agents' streams in memory, and allocates as fast as its
requests come. On CPython's defaults (a young generation of 700
objects) an object that lives through a few concurrent requests is
promoted, and so many were at 5,000 nodes that each web process ran a
full collection, over everything it holds, 6-11 times a minute: 0.7-1.2 s
each, 11-20% of the process's time, every thread stopped meanwhile,
heartbeats included (bench-fleet, 2026-12-07). Settled, 1.5-1.9%, and 19%
less CPU (docs/benchmarks.md, "The garbage collector settled"). The
simulator (llmgw simulate) settles its own the same way.

settle(), once the process has loaded what it keeps at startup, collects
once and freezes the survivors (gc.freeze: no later collection walks
them), and makes the young generation YOUNG objects, so what one request
allocates is gone before a collection can promote it. watch() has the
process say, every WINDOW_S, what share of that window its collections
took and the longest of them, when the share was over SHARE or one
collection over PAUSE_S; nothing is logged otherwise.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

log = logging.getLogger("llmgw.gc")

# The young generation's size; the older two keep CPython's (10, 10).
YOUNG = 50_000
WINDOW_S = 60.0
SHARE = 0.01
PAUSE_S = 0.1


def settle() -> None:
    """What this process loaded until now, collected once and frozen; the
    young generation made YOUNG objects from here on."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)


class Pauses:
    """The collector's pauses, by generation, since the last take()."""

    def __init__(self) -> None:
        self._began = 0.0
        self.counts = [0, 0, 0]
        self.spent = [0.0, 0.0, 0.0]
        self.longest = (0.0, 0)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collection, in whichever thread set it off: only
        # arithmetic here (a log call could wait on a lock that thread holds).
        now = time.perf_counter()
        if phase == "start":
            self._began = now
            return
        generation, took = info["generation"], now - self._began
        self.counts[generation] += 1
        self.spent[generation] += took
        if took > self.longest[0]:
            self.longest = (took, generation)

    def take(self) -> tuple[list[int], list[float], tuple[float, int]]:
        taken = (self.counts, self.spent, self.longest)
        self.counts, self.spent, self.longest = [0, 0, 0], [0.0, 0.0, 0.0], (0.0, 0)
        return taken


def report(pauses: Pauses, window_s: float) -> str | None:
    """The line to log for the window just ended, or None."""
    counts, spent, (longest, generation) = pauses.take()
    share = sum(spent) / window_s
    if share <= SHARE and longest <= PAUSE_S:
        return None
    each = ", ".join(
        f"generation {g}: {counts[g]} in {spent[g]:.2f} s" for g in range(3) if counts[g]
    )
    return (
        f"python's garbage collector held this process {share:.1%} of the last "
        f"{window_s:.0f} s ({each}); the longest {longest:.2f} s (generation {generation})"
    )


_once = threading.Lock()
_pauses: Pauses | None = None


def watch() -> None:
    """Start this process's watch, once."""
    global _pauses
    with _once:
        if _pauses is not None:
            return
        _pauses = Pauses()
        gc.callbacks.append(_pauses)
    threading.Thread(target=_reporting, args=(_pauses,), name="gc-watch", daemon=True).start()


def _reporting(pauses: Pauses) -> None:
    while True:
        time.sleep(WINDOW_S)
        line = report(pauses, WINDOW_S)
        if line is not None:
            log.warning(line)
