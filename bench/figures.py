"""What every benchmark computes the same way."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile (q from 0 to 1) of the samples: a time one
    of them really took, never one interpolated between two."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
