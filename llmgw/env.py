"""Strict readers for settings taken from the environment.

A setting that is present but malformed stops the process at start with the
variable's name, rather than falling back to a default nobody asked for:
`DEBUG=ture` silently meaning False is how a production box ends up with
the wrong behaviour and nobody knowing why.
"""

from __future__ import annotations

import ipaddress
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def string(name: str, default: str | None = None) -> str | None:
    value = _raw(name)
    return default if value is None else value


def boolean(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r}: expected one of true/false/1/0/yes/no/on/off")


def integer(name: str, default: int, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number}: must be at least {minimum}")
    return number


def words(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def url(name: str, schemes: tuple[str, ...]) -> str | None:
    value = _raw(name)
    if value is None:
        return None
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(f"{name}: scheme must be one of {', '.join(schemes)}")
    return value


def networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated addresses or networks (10.0.0.5, 10.0.0.0/24, ::1)."""
    found = []
    for item in words(name, []):
        try:
            found.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an IP address or network (10.0.0.1, 10.0.0.0/24)"
            ) from None
    return tuple(found)
