"""The bounds of the protocol's fields, written once as msgspec constraints.

A bound is what stores the field: a 64-bit or 32-bit column, a text column
of so many characters, a unit's sane range. Decoding a payload into the
structs checks every one of them, so a number the database would refuse is
a 400 naming the field, never a 500 halfway through storing it.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

# Text the control plane stores as the agent's words: no surrounding
# whitespace (the same characters str.strip() removes, which is what `\s`
# matches), not blank, no NUL (PostgreSQL refuses it in text and jsonb) and
# no lone surrogate (not UTF-8, so every page that rendered it would fail).
_EDGE = r"[^\s\x00\ud800-\udfff]"
_BODY = rf"{_EDGE}(?:[^\x00\ud800-\udfff]*{_EDGE})?"
TEXT = rf"^{_BODY}\Z"
BLANK_OR_TEXT = rf"^(?:{_BODY})?\Z"
# A node or fabric name: what a DNS label and a URL path segment both take.
# "\Z", not "$": "$" also matches before a final newline.
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z"

Name = Annotated[str, Meta(pattern=NAME)]
Text32 = Annotated[str, Meta(pattern=TEXT, max_length=32)]
Text64 = Annotated[str, Meta(pattern=TEXT, max_length=64)]
Text200 = Annotated[str, Meta(pattern=TEXT, max_length=200)]
Text253 = Annotated[str, Meta(pattern=TEXT, max_length=253)]
Text255 = Annotated[str, Meta(pattern=TEXT, max_length=255)]
Text1024 = Annotated[str, Meta(pattern=TEXT, max_length=1024)]
Text2000 = Annotated[str, Meta(pattern=TEXT, max_length=2000)]
BlankOrText64 = Annotated[str, Meta(pattern=BLANK_OR_TEXT, max_length=64)]
BlankOrText200 = Annotated[str, Meta(pattern=BLANK_OR_TEXT, max_length=200)]
BlankOrText1024 = Annotated[str, Meta(pattern=BLANK_OR_TEXT, max_length=1024)]

# Measurements, stored as reported: only their column bounds them.
Str16 = Annotated[str, Meta(max_length=16)]
Str32 = Annotated[str, Meta(max_length=32)]
Str64 = Annotated[str, Meta(max_length=64)]
Short = Annotated[str, Meta(max_length=128)]
Str512 = Annotated[str, Meta(max_length=512)]
Long = Annotated[str, Meta(max_length=2000)]
Str4096 = Annotated[str, Meta(max_length=4096)]

Count = Annotated[int, Meta(ge=0, le=INT64_MAX)]
# What lands in a 32-bit column (Gpu, Shard, SubnetManager) is bounded by
# it: the services store it after the measurements, so a number the column
# refuses must be refused here, not by the database halfway through.
Count32 = Annotated[int, Meta(ge=0, le=INT32_MAX)]
Bytes = Count
NonNegative = Annotated[float, Meta(ge=0)]
Percent = Annotated[float, Meta(ge=0, le=100)]
Celsius = Annotated[float, Meta(ge=-100, le=250)]
Watts = Annotated[float, Meta(ge=0, le=100_000)]
Gbps = Annotated[float, Meta(ge=0, le=100_000)]
Cores = Annotated[float, Meta(ge=0, le=100_000)]
Index = Annotated[int, Meta(ge=0, le=255)]
# An XID or SXid code: decimal digits, as the agent writes str(code). Readers
# turn it into a number, and "²".isdigit() is True where int("²") raises.
XID_CODE = r"^[0-9]{1,10}\Z"
XidCode = Annotated[str, Meta(pattern=XID_CODE)]
# "0x" and 16 hex digits (normalize_guid), stored as sent.
Guid = Annotated[str, Meta(max_length=18)]
