"""Byte sizes in refusals, as the control plane prints them: binary units with their names.

The same rules as the server's llmgw.units (the agent imports nothing of llmgw): three
significant figures, and two sizes side by side each in its own unit, with more decimals
only where two different numbers would otherwise read the same ("4.00 GiB" against a
limit of "4.00 GiB" would say nothing).
"""

from __future__ import annotations

_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def _unit(n: float) -> tuple[str, int]:
    for name, size in _UNITS:
        if abs(n) >= size:
            return name, size
    return "B", 1


def format_bytes(n: float) -> str:
    """ "90.8 MiB", "4.00 GiB", "512 B"."""
    name, size = _unit(n)
    if size == 1:
        return f"{int(n)} B"
    value = n / size
    decimals = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{decimals}f} {name}"


def format_bytes_pair(a: float, b: float) -> tuple[str, str]:
    left, right = format_bytes(a), format_bytes(b)
    if a == b or left != right:
        return left, right
    name, size = _unit(max(abs(a), abs(b)))
    for decimals in range(3, 7):
        left, right = f"{a / size:.{decimals}f}", f"{b / size:.{decimals}f}"
        if left != right:
            return f"{left} {name}", f"{right} {name}"
    return f"{int(a)} B", f"{int(b)} B"
