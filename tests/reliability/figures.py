"""What each scenario measured, printed as it ends and again at the end of
the run (tests/reliability/conftest.py), so `make test-reliability` shows
every figure whether or not pytest shows a test's own output."""

from __future__ import annotations

import os

FIGURES: list[str] = []

# LLMGW_RELIABILITY=full (make test-reliability): the outages and the load
# docs/reliability.md states. short (the default, in make test): the same scenarios
# with shorter outages and less load, so the whole suite stays quick.
FULL = os.environ.get("LLMGW_RELIABILITY", "short") == "full"


def seconds(full: float, short: float) -> float:
    return full if FULL else short


def record(scenario: str, **figures: object) -> None:
    words = " ".join(
        f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()
    )
    line = f"{scenario} [{'full' if FULL else 'short'}]: {words}"
    FIGURES.append(line)
    print(f"\n{line}")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]
