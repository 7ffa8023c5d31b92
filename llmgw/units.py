"""Byte sizes as every surface prints them: binary units with their names.

One unit system for the CLI, the console, the API's messages and the
refusals, so a machine never reads "8.0G" in one place and "8.6 GB" in
another. The catalog's `memory_gb` is in GiB too (memory is sold in binary
gigabytes: a "16 GB" DIMM holds 16 GiB), so a profile's figure reads back
unchanged everywhere.

Pure and stdlib-only: the scheduler and the agent-free CLI import it.
"""

from __future__ import annotations

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
_UNITS = (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB))
DASH = "-"


def _unit(n: float) -> tuple[str, int]:
    for name, size in _UNITS:
        if abs(n) >= size:
            return name, size
    return "B", 1


def format_bytes(n: float | None, decimals: int | None = None) -> str:
    """ "90.8 MiB", "8.00 GiB", "1.00 TiB"; "-" for unknown (never 0).

    Three significant figures by default: enough to tell 8.00 from 8.04
    GiB, short enough for a table column."""
    if n is None:
        return DASH
    name, size = _unit(n)
    if size == 1:
        return f"{int(n)} B"
    value = n / size
    if decimals is None:
        decimals = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{decimals}f} {name}"


def format_bytes_pair(a: float, b: float) -> tuple[str, str]:
    """Two sizes printed side by side ("uses X, reserved Y"; "has X, needs
    Y"): each in its own unit ("8.00 GiB", "3.91 TiB": never "0.0 TiB",
    which reads as nothing), with more decimals only where two different
    numbers would otherwise read the same."""
    left, right = format_bytes(a), format_bytes(b)
    if a == b or left != right:
        return left, right
    name, size = _unit(max(abs(a), abs(b)))
    for decimals in range(3, 7):
        left, right = f"{a / size:.{decimals}f}", f"{b / size:.{decimals}f}"
        if left != right:
            return f"{left} {name}", f"{right} {name}"
    return f"{int(a)} B", f"{int(b)} B"


def gib(n: float) -> float:
    """Bytes to GiB, for figures that are compared rather than printed."""
    return n / GiB
