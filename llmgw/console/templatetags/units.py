"""Formatting shared by every page. None renders as "-": unknown is not zero."""

from django import template

register = template.Library()
DASH = "-"


@register.filter
def gib(value: int | None) -> str:
    if value is None:
        return DASH
    return f"{value / 2**30:.1f} GiB"


@register.filter
def pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}%"


@register.filter
def dash(value: object) -> object:
    return DASH if value in (None, "") else value


@register.filter
def used_pct(node: dict) -> float | None:
    total, avail = node.get("memory_total_bytes"), node.get("memory_available_bytes")
    if not total or avail is None:
        return None
    return 100.0 * (total - avail) / total
