"""Every bad field of a refused payload, named by its path.

msgspec stops at the first error; an agent author wants the whole list
("cpu.utilization_percent", "filesystems.1.free_bytes") to fix in one go.
So once a payload is refused, each field is checked again against its own
type from the same structs: nothing here restates a bound.

A message (Join, Registration, Heartbeat and their parts) is named field by
field; a reading (telemetry.Reading: a GPU, a port, a shard) is named by its
place in its list, with msgspec's words for what inside it is wrong.
"""

from __future__ import annotations

import re
import types
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec

from .telemetry import Reading

_AT = re.compile(r" - at `\$([^`]*)`\Z")


def field_errors(value: Any, kind: Any) -> dict[str, list[str]]:
    """{"filesystems.1.free_bytes": ["Expected `int` >= 0"], ...}; {} when
    `value` converts to `kind`."""
    errors: dict[str, list[str]] = {}
    _check(value, kind, "", errors)
    return errors


def _check(value: Any, kind: Any, path: str, errors: dict[str, list[str]]) -> None:
    try:
        msgspec.convert(value, kind)
        return
    except msgspec.ValidationError as exc:
        message = str(exc)
    inner = _unwrap(kind)
    if value is not None and _check_inside(value, inner, path, errors):
        return
    if not _is_message(inner):
        # A reading, a mapping or a plain value: named where it is, and
        # msgspec's message says where inside it.
        _add(errors, path or "payload", message)
        return
    where, what = _split(message)
    if not where:
        # A check across fields (__post_init__) says which one it is about.
        name, _, rest = what.partition(": ")
        if rest and name in {f.encode_name for f in msgspec.structs.fields(inner)}:
            where, what = name, rest
    _add(errors, _join(path, where), what)


def _is_message(kind: Any) -> bool:
    return (
        isinstance(kind, type)
        and issubclass(kind, msgspec.Struct)
        and not issubclass(kind, Reading)
    )


def _check_inside(value: Any, kind: Any, path: str, errors: dict[str, list[str]]) -> bool:
    """Check the parts of `value` one by one; True when one was named."""
    before = len(errors)
    if _is_message(kind) and isinstance(value, dict):
        for field in msgspec.structs.fields(kind):
            if field.encode_name in value:
                _check(value[field.encode_name], field.type, _join(path, field.encode_name), errors)
            elif field.required:
                _add(errors, _join(path, field.encode_name), "This field is required.")
    elif get_origin(kind) is list and isinstance(value, list):
        (item,) = get_args(kind)
        for i, each in enumerate(value):
            _check(each, item, _join(path, str(i)), errors)
    return len(errors) > before


def _unwrap(kind: Any) -> Any:
    """The type inside Annotated[...] and `X | None | UnsetType`."""
    while True:
        if get_origin(kind) is Annotated:
            kind = get_args(kind)[0]
        elif get_origin(kind) in (Union, types.UnionType):
            rest = [a for a in get_args(kind) if a not in (type(None), msgspec.UnsetType)]
            if len(rest) != 1:
                return kind
            kind = rest[0]
        else:
            return kind


def _split(message: str) -> tuple[str, str]:
    """msgspec's "Expected `int` - at `$.a[0].b`" as (".a.0.b", "Expected `int`")."""
    found = _AT.search(message)
    if found is None:
        return "", message
    where = re.sub(r"\[(\d+)\]", r".\1", found.group(1))
    return where, message[: found.start()]


def _join(path: str, key: str) -> str:
    key = key.lstrip(".")
    if not key:
        return path or "payload"
    return f"{path}.{key}" if path else key


def _add(errors: dict[str, list[str]], where: str, message: str) -> None:
    errors.setdefault(where, []).append(message)
