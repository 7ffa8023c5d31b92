"""One check's answer: ok, warn, fail or unknown, what was seen, and what to do.

Unknown is its own answer: a check that could not look (tool missing, no access, no
control plane) must never read as one that looked and found nothing wrong.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

OK, WARN, FAIL, UNKNOWN = "ok", "warn", "fail", "unknown"
_RANK = {OK: 0, UNKNOWN: 1, WARN: 2, FAIL: 3}


@dataclass(frozen=True)
class Check:
    name: str
    result: str
    detail: str
    action: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def worst(results: list[str]) -> str:
    return max(results, key=_RANK.__getitem__) if results else OK
