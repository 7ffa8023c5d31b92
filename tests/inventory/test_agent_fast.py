"""The heartbeat's fast decode (agent_request.decode: the body decoded
straight into the Heartbeat struct) against the checked path (the body read by the strict reader, then
converted into the same struct, every bad field named): they accept and
refuse alike and produce the same data, and the checked path names a field
whenever it refuses. The forms a lenient reader would coerce ("12" for 12,
" /data " for "/data", 1 for true) are refused by both."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmgw_agent.protocol.errors import field_errors
from llmgw_agent.protocol.messages import Heartbeat

from llmgw.inventory.api.agent_request import decode
from tests.payloads import heartbeat

# Text the protocol takes: no surrounding whitespace, no NUL, no surrogate.
_inner = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
_edge = _inner.filter(lambda c: not c.isspace())


@st.composite
def clean_text(draw: Any, max_length: int) -> str:
    middle = draw(st.text(_inner, max_size=min(max_length, 12) - 2)) if max_length > 2 else ""
    text = draw(_edge) + middle + draw(_edge) if draw(st.booleans()) else draw(_edge)
    return text[:max_length].rstrip() or "x"


class Draw:
    """Draws a value per field kind, either valid or one of the known ways
    to be wrong: strictly wrong, or a form a lenient reader would coerce."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        # Half the payloads are clean throughout, so both sides get to accept.
        self.noisy = draw(st.booleans())

    def pick(self, valid: Any, strict_invalid: list[Any], lenient: list[Any]) -> Any:
        kind = (
            self.draw(st.sampled_from(["valid"] * 12 + ["invalid", "lenient"]))
            if self.noisy
            else "valid"
        )
        if (
            kind == "valid"
            or (kind == "invalid" and not strict_invalid)
            or (kind == "lenient" and not lenient)
        ):
            return self.draw(valid)
        if kind == "invalid":
            return self.draw(st.sampled_from(strict_invalid))
        return self.draw(st.sampled_from(lenient))

    def text(self, max_length: int, blank: bool = False, null: bool = False) -> Any:
        strict = [[], {}, True, "a\x00b", "x" * (max_length + 1)] + ([] if blank else ["", "   "])
        strict += [] if null else [None]
        lenient = [" padded ", 5, 2.5] + (["   "] if blank else [])
        valid = clean_text(max_length) | st.just("") if blank else clean_text(max_length)
        return self.pick(valid | st.just(None) if null else valid, strict, lenient)

    def integer(self, null: bool = False) -> Any:
        strict = [-1, 1.5, True, "x", [], "-3"] + ([] if null else [None])
        lenient = ["12", 7.0, 2**70]
        valid = st.integers(0, 2**62)
        return self.pick(valid | st.just(None) if null else valid, strict, lenient)

    def number(self, low: float | None = 0, high: float | None = None, null: bool = False) -> Any:
        strict = ["x", [], "nan", "inf"] + ([] if null else [None])
        strict += [] if low is None else [low - 0.5]
        strict += [] if high is None else [high + 0.5]
        lenient = ["1.5", True, False]
        valid = st.floats(low, high, allow_nan=False, allow_infinity=False) | st.integers(
            int(low or 0), int(high or 2**40)
        )
        return self.pick(valid | st.just(None) if null else valid, strict, lenient)

    def boolean(self) -> Any:
        return self.pick(st.booleans(), [None, 2, "maybe", []], ["true", "no", 1, 0])

    def listing(self, item: Any, max_length: int, min_length: int = 0) -> Any:
        size = self.draw(st.integers(min_length, min(max_length, 3)))
        items = [item() for _ in range(size)]
        return self.pick(st.just(items), ["nope", {"a": 1}, None, [[1]]], [])

    def obj(self, fields: dict[str, Any], optional: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, make in fields.items():
            if name in optional and self.draw(st.integers(0, 4)) == 0:
                continue
            if name not in optional and self.noisy and self.draw(st.integers(0, 30)) == 0:
                continue  # a required field missing: refused
            out[name] = make()
        if self.draw(st.integers(0, 8)) == 0:
            out["unknown_extra"] = [1, {"x": None}]  # ignored by both
        return out


@st.composite
def payloads(draw: Any) -> dict[str, Any]:
    d = Draw(draw)

    def filesystem() -> dict[str, Any]:
        fs = d.obj(
            {
                "mount": lambda: (
                    draw(st.sampled_from(["/data", "/lustre", "/scratch"]))
                    if draw(st.booleans())
                    else d.text(1024)
                ),
                "device": lambda: d.text(1024, blank=True),
                "fstype": lambda: d.text(64, blank=True),
                "shared": d.boolean,
                "free_bytes": d.integer,
                "total_bytes": d.integer,
                "dirs": lambda: d.listing(lambda: d.text(1024), 64),
            },
            {"device", "fstype", "dirs"},
        )
        if isinstance(fs.get("free_bytes"), int) and draw(st.booleans()):
            fs["total_bytes"] = fs["free_bytes"] + draw(st.integers(0, 10))  # mostly consistent
        return fs

    payload = d.obj(
        {
            "schema": lambda: d.pick(st.just(1), [2, 0, None, "two"], ["1", 1.0]),
            "node": lambda: d.pick(
                st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,20}\Z"),
                ["-x", "", "a b", "x" * 254, "gpu-1\nx", None],
                [" gpu-1 ", "gpu-1\n", 5],
            ),
            "sent_at": lambda: d.pick(
                st.datetimes().map(
                    lambda t: (
                        t.strftime("%Y-%m-%dT%H:%M:%S") + draw(st.sampled_from(["Z", "+02:00", ""]))
                    )
                ),
                [
                    "2026-13-01T00:00:00Z",
                    "yesterday",
                    5,
                    None,
                    "2026-11-30T23:59:60Z",
                    "2026-11-30t04:00:00z",
                ],
                ["2026-11-30 04:00:00Z", "2026-11-30T04:00Z", "2026-11-30T04:00:00.1234567Z"],
            ),
            "cpu": lambda: d.obj(
                {
                    "utilization_percent": lambda: d.number(0, 100, null=True),
                    "load": lambda: (
                        d.listing(lambda: d.number(0), 3, 3)
                        if draw(st.booleans())
                        else d.listing(lambda: d.number(0), 5)
                    ),
                },
                set(),
            ),
            "memory": lambda: d.obj(
                {
                    "used_bytes": lambda: d.integer(null=True),
                    "available_bytes": lambda: d.integer(null=True),
                },
                set(),
            ),
            "filesystems": lambda: d.listing(filesystem, 256),
            "weights": lambda: d.obj(
                {
                    "probed": d.boolean,
                    "models": lambda: d.listing(
                        lambda: d.obj(
                            {
                                "name": lambda: d.text(255),
                                "path": lambda: d.text(1024),
                                "shared": d.boolean,
                            },
                            set(),
                        ),
                        10000,
                    ),
                },
                set(),
            ),
            "collectors": lambda: d.listing(
                lambda: d.obj(
                    {
                        "name": lambda: d.text(64),
                        "ok": d.boolean,
                        "seconds": lambda: d.number(0),
                        "error": lambda: d.text(2000, null=True),
                    },
                    {"error"},
                ),
                64,
            ),
        },
        {"sent_at", "cpu", "memory", "filesystems", "weights", "collectors"},
    )
    return payload


def canonical(data: dict[str, Any]) -> str:
    # Types matter (1 and 1.0 are stored differently), so compare as JSON.
    return json.dumps(data, sort_keys=True, default=repr)


def checked(payload: dict[str, Any]) -> dict[str, Any] | None:
    """What HeartbeatView stores, or None when it refuses (naming a field)."""
    try:
        data: dict[str, Any] = msgspec.to_builtins(msgspec.convert(payload, Heartbeat))
    except msgspec.ValidationError:
        assert field_errors(payload, Heartbeat), "refused without naming a field"
        return None
    assert field_errors(payload, Heartbeat) == {}
    return data


@settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(payloads())
def test_the_fast_path_agrees_with_the_checked_path(payload: dict[str, Any]) -> None:
    fast = decode(json.dumps(payload).encode(), Heartbeat)
    slow = checked(payload)
    if fast is None:
        assert slow is None, "the fast path refused what the checked path takes"
    else:
        assert slow is not None, "the fast path took what the checked path refuses"
        assert canonical(fast) == canonical(slow)


def test_the_payload_of_the_protocol_takes_the_fast_path() -> None:
    payload = heartbeat(
        "gpu-1",
        sent_at="2026-11-30T04:00:00Z",
        collectors=[{"name": "cpu", "ok": True, "seconds": 0.001, "error": None}],
    )
    fast = decode(json.dumps(payload).encode(), Heartbeat)
    assert fast is not None
    assert canonical(fast) == canonical(checked(payload))  # type: ignore[arg-type]


def test_whitespace_means_what_str_strip_means() -> None:
    # The protocol's text patterns refuse surrounding whitespace with \s; a
    # string with any is what str.strip() would change. They must agree on
    # every code point.
    space = re.compile(r"\s")
    assert [
        c for c in map(chr, range(sys.maxunicode + 1)) if bool(space.match(c)) != (c.strip() == "")
    ] == []
