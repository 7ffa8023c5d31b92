"""What every benchmark computes the same way."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile (q from 0 to 1) of the samples: a time one
    of them really took, never one interpolated between two."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def unmeasured(runs: dict[str, tuple[int, int]]) -> list[str]:
    """What makes a benchmark's figures worthless, per run named: (samples,
    errors) with no samples, or with errors. A benchmark prints these and
    exits non-zero, so that its short form in the tests fails where the
    benchmark can no longer measure, whatever its speed."""
    problems = []
    for name, (samples, errors) in runs.items():
        if not samples:
            problems.append(f"{name}: nothing measured ({errors} errors)")
        elif errors:
            problems.append(f"{name}: {errors} errors beside {samples} samples")
    return problems


def report_unmeasured(runs: dict[str, tuple[int, int]]) -> int:
    """Print what `unmeasured` found; the exit status to leave with."""
    problems = unmeasured(runs)
    for problem in problems:
        print(f"could not measure: {problem}", flush=True)
    return 1 if problems else 0
