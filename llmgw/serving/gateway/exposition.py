"""Reading an engine's /metrics (Prometheus text exposition) for the few
samples the gateway routes on."""

from __future__ import annotations

from collections.abc import Collection


def sum_samples(text: str, names: Collection[str]) -> float | None:
    """The sum of the samples of `names` over their label sets; None if the
    text has none (NaN, an engine's "no figure", counts as none)."""
    total: float | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        ends = [i for i in (line.find("{"), line.find(" ")) if i >= 0]
        if not ends or line[: min(ends)] not in names:
            continue
        end = min(ends)
        rest = line[line.rfind("}") + 1 :] if line[end] == "{" else line[end:]
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if value == value:
            total = (total or 0.0) + value
    return total
