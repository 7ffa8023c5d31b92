"""What every edge accepts: a clean string, a bounded number, a JSON body
that holds only those and is not nested deeper than MAX_DEPTH.

The agent API, the REST API's parsers, the gateway and the catalog loader
all check with these, so the rules cannot drift apart between them:

- A string is clean when it is valid UTF-8 and holds no NUL. PostgreSQL
  refuses NUL in text and jsonb (the write fails, the request answers 500),
  and a lone UTF-16 surrogate ("\\ud800", which JSON's escapes can spell
  and Python's json module decodes) cannot be encoded as UTF-8, so once
  stored every page that renders it answers 500.
- A number is finite and within the range its column or its unit allows:
  JSON has no infinity, so a stored one cannot be rendered again, and
  1e308 GiB overflows the first multiplication by GiB.
- Nesting is limited: a parser recurses once per level, and 100,000
  brackets exhaust the stack before any field is looked at.

Refusals name the field, as a dotted path ("gpus.0.uuid"), so whoever sent
it knows what to fix. Pure Python, no Django: the gateway and the catalog
loader use it outside a request.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
# More refusals than this in one body say nothing more useful.
MAX_ERRORS = 20

_UNCLEAN = re.compile("[\x00\ud800-\udfff]")


class Refused(ValueError):
    """A body refused whole: {"field.path": ["what is wrong", ...]}."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def text_problem(value: str) -> str | None:
    """Why `value` is not a clean string, or None when it is."""
    found = _UNCLEAN.search(value)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"contains a NUL character (at {found.start()})"
    return f"is not valid UTF-8: a lone surrogate {ascii(found.group())} (at {found.start()})"


def number_problem(
    value: float, low: float | None = None, high: float | None = None, unit: str = ""
) -> str | None:
    """Why `value` is out of bounds, or None when it is within them."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    suffix = f" {unit}" if unit else ""
    if low is not None and value < low:
        return f"{value}{suffix} is below the minimum of {low}{suffix}"
    if high is not None and value > high:
        return f"{value}{suffix} is over the maximum of {high}{suffix}"
    return None


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def problems(value: Any, path: str = "", max_depth: int = MAX_DEPTH) -> dict[str, list[str]]:
    """Every unclean string (keys too), non-finite or over-64-bit number and
    nesting deeper than `max_depth` in parsed JSON, by path. Iterative: the
    walk itself must not be what a deep body exhausts."""
    errors: dict[str, list[str]] = {}

    def add(where: str, message: str) -> None:
        errors.setdefault(where or "payload", []).append(message)

    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack and len(errors) < MAX_ERRORS:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if (problem := text_problem(item)) is not None:
                add(where, problem)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -INT64_MAX - 1 <= item <= INT64_MAX:
                add(where, "is outside the 64-bit range of any stored number")
        elif isinstance(item, float):
            if not math.isfinite(item):
                add(where, f"{item} is not a finite number")
        elif isinstance(item, dict | list):
            if depth > max_depth:
                add(where, f"is nested deeper than {max_depth} levels")
                continue
            if isinstance(item, list):
                stack.extend((v, _join(where, i), depth + 1) for i, v in enumerate(item))
                continue
            for key, v in item.items():
                if isinstance(key, str) and (problem := text_problem(key)) is not None:
                    # The key cannot name the path: it is what is wrong.
                    add(where, f"a key {ascii(key[:40])} {problem}")
                    continue
                stack.append((v, _join(where, key), depth + 1))
    return errors


def loads(body: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON body, or Refused naming what is wrong with it. Only UTF-8
    (RFC 8259): json.loads would also guess UTF-16 and UTF-32."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused({"payload": [f"not UTF-8: {exc.reason} at byte {exc.start}"]}) from None
    try:
        # NaN, Infinity and numbers too large for a float (1e999) parse to
        # non-finite floats here; problems() then names them by their field.
        value = json.loads(body or "null")
    except RecursionError:
        raise Refused({"payload": [f"nested deeper than {max_depth} levels"]}) from None
    except ValueError as exc:
        raise Refused({"payload": [f"not JSON: {exc}"]}) from None
    errors = problems(value, max_depth=max_depth)
    if errors:
        raise Refused(errors)
    return value
