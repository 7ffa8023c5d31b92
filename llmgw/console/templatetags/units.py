"""Formatting shared by every page. None renders as "-": unknown is not zero."""

from typing import Any

from django import template

from llmgw.units import format_bytes

register = template.Library()
DASH = "-"


@register.filter  # type: ignore[untyped-decorator]  # Django ships no types
def gib(value: int | None) -> str:
    return format_bytes(value)


@register.filter  # type: ignore[untyped-decorator]  # Django ships no types
def pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}%"


@register.filter  # type: ignore[untyped-decorator]  # Django ships no types
def dash(value: object) -> object:
    return DASH if value in (None, "") else value


@register.filter  # type: ignore[untyped-decorator]  # Django ships no types
def used_pct(node: dict[str, Any]) -> float | None:
    total: int | None = node.get("memory_total_bytes")
    avail: int | None = node.get("memory_available_bytes")
    if not total or avail is None:
        return None
    return 100.0 * (total - avail) / total
