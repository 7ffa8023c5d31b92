"""Each node's power figures from what its agent last reported.

Derived: the sum of its GPUs' enforced power limits (NVML), the most the
cards may draw. Measured: GPU power draw plus CPU package power (RAPL).
A figure no card or package reported is None, never 0: a node without
readings is unknown, not idle. Declared (what its shards' profiles say)
comes from the shards, which placement's snapshot counts.
"""

from __future__ import annotations

from typing import Any


def _sum(values: list[Any]) -> float | None:
    known = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return sum(known) if known else None


def gpu_limits(telemetry: list[dict[str, Any]] | None) -> dict[int, float]:
    """GPU index -> its enforced power limit, where reported."""
    out: dict[int, float] = {}
    for s in telemetry or []:
        if isinstance(s, dict) and isinstance(s.get("power_limit_w"), int | float):
            out[s.get("index", -1)] = float(s["power_limit_w"])
    return out


def derived(telemetry: list[dict[str, Any]] | None) -> float | None:
    return _sum([s.get("power_limit_w") for s in telemetry or [] if isinstance(s, dict)])


def measured(
    telemetry: list[dict[str, Any]] | None, sensors: dict[str, Any] | None
) -> float | None:
    gpus = [s.get("power_draw_w") for s in telemetry or [] if isinstance(s, dict)]
    packages = [
        p.get("power_w") for p in (sensors or {}).get("cpu_packages") or [] if isinstance(p, dict)
    ]
    return _sum(gpus + packages)


def largest(*figures: float | None) -> float | None:
    known = [f for f in figures if f is not None]
    return max(known) if known else None


def kw(watts: float | None) -> str:
    return "-" if watts is None else f"{watts / 1000:.1f} kW"
