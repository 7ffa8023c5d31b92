"""Tokens per key and model, from the engines' own `usage`.

A JSON answer's `usage` is read with a decoder that skips everything else.
A stream reports usage only when asked (`stream_options.include_usage`,
which llama-server, vLLM and SGLang honour as OpenAI does: one last event
with empty `choices` and the usage): the gateway asks for it on every
stream, and when the client had not asked, drops that event and the
`"usage": null` the engine then puts in its other events, so the client
reads the stream it would have had. A stream that breaks or that the client
hangs up on reports nothing and is not counted (the engines tell only at
the end).

Each process adds to a dictionary in memory (no I/O on the request path)
and saves it to the database every few seconds in one statement
(`save`), off the request path in the gateway's database thread; a batch
that fails to save is kept for the next. /metrics reads the saved totals,
so every web process reports the same figures and they survive restarts.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import msgspec
from django.db import connection
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from llmgw.serving.gateway.naming import StreamRenamer, rename

log = logging.getLogger("llmgw.gateway")
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_USAGE = b'"usage"'
_OPTIONS = b'"stream_options"'
_ASK = b',"stream_options":{"include_usage":true}}'

# (key id, model) -> [requests, prompt tokens, completion tokens]
Batch = dict[tuple[int, str], list[int]]


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Answer(msgspec.Struct):
    usage: _Usage | None = None


_decode_answer = msgspec.json.Decoder(_Answer).decode


def tokens_of(body: bytes) -> tuple[int, int] | None:
    """(prompt, completion) from a JSON answer's usage; None without one."""
    if _USAGE not in body:
        return None
    try:
        usage = _decode_answer(body).usage
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return None if usage is None else (usage.prompt_tokens, usage.completion_tokens)


def ask_for_usage(body: bytes) -> tuple[bytes, bool]:
    """A stream's body asking the engine for its usage, and whether the
    client had not asked (so the usage event is the gateway's to drop)."""
    if _OPTIONS not in body:
        # A JSON object (body.py decoded it as one) with at least "model":
        # the option goes in before its closing brace, the rest untouched.
        return body.rstrip()[:-1] + _ASK, True
    try:
        request: Any = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return body, False
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body, False
    if options is not None and not isinstance(options, dict):
        return body, False  # the engine says what is wrong with it
    request["stream_options"] = {**(options or {}), "include_usage": True}
    return _encode(request), True


def reported(state: dict[str, Any]) -> tuple[int, int] | None:
    """(prompt, completion) the engine reported for a forwarded request
    (the proxy's `state`: "usage" for a JSON answer, "meter" for a stream)."""
    meter = state.get("meter")
    return meter.usage if meter is not None else state.get("usage")


class StreamMeter(StreamRenamer):
    """The stream renamed as before, its usage read on the way; the usage
    event dropped when the gateway, not the client, asked for it."""

    __slots__ = ("drop", "usage")

    def __init__(self, model: str, drop: bool) -> None:
        super().__init__(model)
        self.drop = drop
        self.usage: tuple[int, int] | None = None

    def feed(self, chunk: bytes) -> bytes:
        data = self._rest + chunk if self._rest else chunk
        if _USAGE not in data:
            return super().feed(chunk)
        end = data.rfind(b"\n")
        if end < 0:
            self._rest = data
            return b""
        self._rest = data[end + 1 :]
        lines = (self._metered(line) for line in data[: end + 1].split(b"\n"))
        return b"\n".join(line for line in lines if line is not None)

    def _metered(self, line: bytes) -> bytes | None:
        if not line.startswith(b"data:") or _USAGE not in line:
            return self._line(line)
        cr = b"\r" if line.endswith(b"\r") else b""
        payload = line[5 : len(line) - len(cr)]
        space = b" " if payload.startswith(b" ") else b""
        try:
            event: Any = _decode(payload[len(space) :])
        except (msgspec.DecodeError, RecursionError):
            return line
        if not isinstance(event, dict):
            return line
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = (
                int(usage.get("prompt_tokens") or 0),
                int(usage.get("completion_tokens") or 0),
            )
        if self.drop and "usage" in event:
            if not event.get("choices"):
                return None  # the usage event the client did not ask for
            del event["usage"]
        renamed = rename(_encode(event), self.model)
        return b"data:" + space + renamed + cr


class Meter:
    """This process's usage since it last saved."""

    def __init__(self) -> None:
        self.batch: Batch = {}
        self._warned_at = -math.inf

    def add(self, key_id: int, model: str, tokens: tuple[int, int] | None) -> None:
        row = self.batch.get((key_id, model))
        if row is None:
            row = self.batch[(key_id, model)] = [0, 0, 0]
        row[0] += 1
        if tokens is not None:
            row[1] += tokens[0]
            row[2] += tokens[1]

    def take(self) -> Batch:
        batch, self.batch = self.batch, {}
        return batch

    def put_back(self, batch: Batch, failure: BaseException | None = None) -> None:
        """A batch that failed to save, added to what came meanwhile; the
        failure logged once a minute at most (it is tried every second)."""
        now = time.monotonic()
        if failure is not None and now - self._warned_at >= 60:
            self._warned_at = now
            log.warning("gateway: usage not saved, kept for the next try: %r", failure)
        for key, (requests, prompt, completion) in batch.items():
            row = self.batch.setdefault(key, [0, 0, 0])
            row[0] += requests
            row[1] += prompt
            row[2] += completion


def save(batch: Batch) -> None:
    """Add a batch to the saved totals in one statement (the gateway's
    database thread). A key deleted meanwhile takes its usage with it."""
    if not batch:
        return
    rows = [(k, m, r, p, c) for (k, m), (r, p, c) in sorted(batch.items())]
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO serving_keyusage
                (api_key_id, model, requests, prompt_tokens, completion_tokens, updated_at)
            SELECT v.k, v.m, v.r, v.p, v.c, now()
            FROM (VALUES {values}) AS v (k, m, r, p, c)
            JOIN serving_apikey ON serving_apikey.id = v.k
            ON CONFLICT (api_key_id, model) DO UPDATE SET
                requests = serving_keyusage.requests + excluded.requests,
                prompt_tokens = serving_keyusage.prompt_tokens + excluded.prompt_tokens,
                completion_tokens = serving_keyusage.completion_tokens
                    + excluded.completion_tokens,
                updated_at = excluded.updated_at
            """,  # noqa: S608  # only placeholders are formatted in
            [value for row in rows for value in row],
        )


class UsageCollector(Collector):
    """The saved totals per key and model, for /metrics."""

    def collect(self) -> Iterator[Metric]:
        from llmgw.serving.models import KeyUsage

        rows = KeyUsage.objects.values_list(
            "api_key_id", "api_key__name", "model", "requests", "prompt_tokens", "completion_tokens"
        ).order_by("api_key_id", "model")
        requests = CounterMetricFamily(
            "llmgw_gateway_key_requests",
            "Requests the gateway answered for a key and model (saved every few seconds)",
            labels=["key_id", "key", "model"],
        )
        tokens = CounterMetricFamily(
            "llmgw_gateway_key_tokens",
            "Tokens the engines reported for a key and model, by kind (prompt, completion)",
            labels=["key_id", "key", "model", "kind"],
        )
        for key_id, name, model, count, prompt, completion in rows:
            labels = [str(key_id), name, model]
            requests.add_metric(labels, count)
            tokens.add_metric([*labels, "prompt"], prompt)
            tokens.add_metric([*labels, "completion"], completion)
        yield requests
        yield tokens
