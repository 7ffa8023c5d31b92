"""Formatting shared by every page. None renders as "-": unknown is not zero."""

from django import template

from llmgw.units import format_bytes

register = template.Library()
DASH = "-"


@register.filter
def gib(value: int | None) -> str:
    return format_bytes(value)


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
