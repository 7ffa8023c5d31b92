"""The heartbeat's fast validator: msgspec types that accept exactly the
canonical heartbeats HeartbeatSerializer accepts, decoded and checked in one
pass over the body with nothing built per request.

It only ever answers "valid, and here is the data" or "not sure". The view
sends every "not sure" to the DRF serializer, which stays the authority: it
alone writes error messages (naming every bad field) and accepts the lenient
forms DRF coerces ("12" for 12, " /data " for "/data", 1 for true). So this
may refuse more than the serializer, never less, and whatever it accepts
comes out as the same data (tests/inventory/test_agent_fast.py checks both
against each other with hypothesis).

The view's reader (llmgw.validation.loads) refuses NUL, lone surrogates,
non-finite numbers and deep nesting anywhere in the body. msgspec refuses
the surrogates and non-finite numbers it decodes, a NUL is handed over
below, and a body too deep for msgspec is handed over too. What msgspec
skips without building, the unknown fields neither path stores, is not
held to the reader's limits here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

import msgspec
from rest_framework import serializers

from llmgw.inventory.api import telemetry_schema as t
from llmgw.inventory.api.agent_serializers import SCHEMA

# DRF's CharField strips surrounding whitespace (str.strip(), which is what
# `\s` matches too), refuses blanks, NUL and surrogate characters; a string
# with any of those is left to it.
_EDGE = r"[^\s\x00\ud800-\udfff]"
_BODY = rf"{_EDGE}(?:[^\x00\ud800-\udfff]*{_EDGE})?"
TEXT = rf"^{_BODY}\Z"
BLANK_OR_TEXT = rf"^(?:{_BODY})?\Z"
# agent_serializers.NAME, anchored with \Z: "$" also matches before a final
# newline, which DRF strips first and this would keep.
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z"


def _text(max_length: int) -> Any:
    return Annotated[str, msgspec.Meta(pattern=TEXT, max_length=max_length)]


def _blank_or_text(max_length: int) -> Any:
    return Annotated[str, msgspec.Meta(pattern=BLANK_OR_TEXT, max_length=max_length)]


Bytes = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Cpu(TypedDict):
    utilization_percent: Annotated[float, msgspec.Meta(ge=0, le=100)] | None
    load: Annotated[list[NonNegative], msgspec.Meta(min_length=3, max_length=3)]


class Memory(TypedDict):
    used_bytes: Bytes | None
    available_bytes: Bytes | None


class Filesystem(TypedDict):
    mount: _text(1024)  # type: ignore[valid-type]
    device: NotRequired[_blank_or_text(1024)]  # type: ignore[valid-type]
    fstype: NotRequired[_blank_or_text(64)]  # type: ignore[valid-type]
    shared: bool
    free_bytes: Bytes
    total_bytes: Bytes
    dirs: NotRequired[Annotated[list[_text(1024)], msgspec.Meta(max_length=64)]]  # type: ignore[valid-type]


class Model(TypedDict):
    name: _text(255)  # type: ignore[valid-type]
    path: _text(1024)  # type: ignore[valid-type]
    shared: bool


class Weights(TypedDict):
    probed: bool
    models: Annotated[list[Model], msgspec.Meta(max_length=10000)]


class Collector(TypedDict):
    name: _text(64)  # type: ignore[valid-type]
    ok: bool
    seconds: NonNegative
    error: NotRequired[_text(2000) | None]  # type: ignore[valid-type]


class Heartbeat(TypedDict):
    schema: Literal[SCHEMA]  # type: ignore[valid-type]
    node: Annotated[str, msgspec.Meta(pattern=NAME)]
    # Checked by DRF's own field below: msgspec's RFC 3339 parser accepts
    # forms (a lowercase "z") that DRF refuses, and rounds where DRF truncates.
    sent_at: NotRequired[str]
    cpu: NotRequired[Cpu]
    memory: NotRequired[Memory]
    filesystems: NotRequired[Annotated[list[Filesystem], msgspec.Meta(max_length=256)]]
    weights: NotRequired[Weights]
    collectors: NotRequired[Annotated[list[Collector], msgspec.Meta(max_length=64)]]
    # Telemetry sections: the same msgspec types the serializer checks them with.
    gpus: NotRequired[Annotated[list[t.GpuSample], msgspec.Meta(max_length=256)]]
    sensors: NotRequired[t.Sensors]
    imex: NotRequired[t.Imex]
    sxids: NotRequired[t.XidCounters]
    xids_unattributed: NotRequired[t.XidCounters]
    engines: NotRequired[Annotated[list[t.Engine], msgspec.Meta(max_length=64)]]
    engines_probed: NotRequired[bool]
    ports: NotRequired[Annotated[list[t.PortSample], msgspec.Meta(max_length=256)]]
    shards: NotRequired[Annotated[list[t.ShardReport], msgspec.Meta(max_length=256)]]
    fabrics_changed: NotRequired[bool]
    fabrics_active: NotRequired[Annotated[list[_text(64)], msgspec.Meta(max_length=64)]]  # type: ignore[valid-type]
    subnet_managers: NotRequired[Annotated[list[t.ManagerListing], msgspec.Meta(max_length=256)]]
    notices: NotRequired[Annotated[list[_text(2000)], msgspec.Meta(max_length=32)]]  # type: ignore[valid-type]
    warnings: NotRequired[Annotated[list[_text(2000)], msgspec.Meta(max_length=32)]]  # type: ignore[valid-type]


_STRUCTS = ("gpus", "sensors", "imex", "engines", "ports", "subnet_managers", "shards")


_decoder = msgspec.json.Decoder(Heartbeat)
_sent_at = serializers.DateTimeField()


def decode_heartbeat(body: bytes) -> dict[str, Any] | None:
    """The validated heartbeat, as HeartbeatSerializer.validated_data would
    hold it; None when the serializer must decide."""
    # JSON can only spell a NUL as an escape. A false alarm (an escaped
    # backslash before "u0000") costs only the slower path.
    if b"\\u0000" in body:
        return None
    try:
        data: dict[str, Any] = _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    for key in _STRUCTS:
        if key in data:
            data[key] = msgspec.to_builtins(data[key])
    filesystems = data.get("filesystems")
    if filesystems is not None:
        if any(fs["free_bytes"] > fs["total_bytes"] for fs in filesystems):
            return None
        if len({fs["mount"] for fs in filesystems}) != len(filesystems):
            return None
    if "sent_at" in data:
        try:
            data["sent_at"] = _sent_at.run_validation(data["sent_at"])
        except serializers.ValidationError:
            return None
    return data
