"""The gateway's connections to the engines: a request forwarded to the
least loaded ready replica, and the engines' queues scraped.

aiohttp to the engine (measured here at about a ninth of httpx's CPU per
request). Bodies pass through untouched; a stream goes out chunk by chunk
as the engine writes it.

An answer names the model the client asked for, not the engine's own
name for it (naming.py).

A failed replica (refused connection, 5xx, a stream that ends before its
first byte) is retried on another one only while nothing has reached the
client; after that the stream ends with an OpenAI-style error event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp

from llmgw.serving.gateway.asgi import Send
from llmgw.serving.gateway.errors import send_error, sse_error_event
from llmgw.serving.gateway.naming import rename
from llmgw.serving.gateway.routing import BACKOFF_S, Router, Upstream, parse_queue_depth
from llmgw.serving.gateway.usage import StreamMeter, tokens_of

log = logging.getLogger("llmgw.gateway")

UPSTREAM_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
_UPSTREAM_HEADERS = {"Content-Type": "application/json"}
_STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
_STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]

# What a replica that failed left to tell the client: its 5xx answer
# (status, body, content type), or why it could not be reached.
Failure = tuple[int, bytes, str] | str


def _session(
    timeout: aiohttp.ClientTimeout, connector: aiohttp.TCPConnector
) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    )


class Proxy:
    def __init__(self, router: Router, timeout: aiohttp.ClientTimeout) -> None:
        self.router = router
        self.timeout = timeout
        self.retries = 0
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession

    def open(self) -> None:
        # Idle connections are dropped before the engines drop them
        # (llama-server and uvicorn both close after 5 s idle): a
        # connection closed under us fails the request sent on it.
        self._session = _session(self.timeout, aiohttp.TCPConnector(limit=0, keepalive_timeout=3))
        # For the one retry after a pooled connection turned out closed.
        self._fresh = _session(self.timeout, aiohttp.TCPConnector(limit=0, force_close=True))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            await self._fresh.close()
            self._session = None

    async def scrape(self) -> None:
        await asyncio.gather(*(self._scrape(up) for up in self.router.upstreams()))

    async def _scrape(self, up: Upstream) -> None:
        assert self._session is not None
        try:
            async with self._session.get(
                up.url + "/metrics", timeout=aiohttp.ClientTimeout(total=2)
            ) as response:
                if response.status != 200:
                    return
                text = await response.text()
        except UPSTREAM_ERRORS:
            return
        # None when the engine does not export a queue: unknown from now on.
        up.engine_queue, up.scraped_at = parse_queue_depth(text), time.monotonic()
        self.router.affinity.scraped(up, text)

    async def forward(
        self, model: str, path: str, body: bytes, stream: bool, send: Send, state: dict[str, Any]
    ) -> int | str:
        """Send the request to the model's replicas until one answers; the
        status the client got ("stream_error" for a stream that broke)."""
        session = self._session
        assert session is not None
        tried: list[Upstream] = []
        failure: Failure = "no replica answered"
        fresh_connection_tried = False
        hashes = self.router.affinity.hashes(path.partition("?")[0], body)
        while (up := self.router.pick(model, tried, hashes)) is not None:
            if tried:
                self.retries += 1
            tried.append(up)
            up.in_flight += 1
            up.waiting += 1
            waiting, response, complete = True, None, False
            try:
                try:
                    client = self._fresh if fresh_connection_tried else session
                    response = await client.post(
                        up.url + path, data=body, headers=_UPSTREAM_HEADERS
                    )
                    if response.status >= 500:
                        failure = (response.status, await response.read(), response.content_type)
                        _blame(up, model, "answered %s", response.status)
                        continue
                    streaming = stream and response.content_type == "text/event-stream"
                    first = await (response.content.readany() if streaming else response.read())
                    if streaming and not first:
                        raise aiohttp.ClientPayloadError("the stream ended before its first byte")
                except UPSTREAM_ERRORS as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                    if response is None and not fresh_connection_tried and _stale(exc):
                        # A pooled connection the engine had closed: the
                        # request never reached it. Once, the same replica
                        # again on a new connection, without blaming it.
                        fresh_connection_tried = True
                        tried.pop()
                        continue
                    _blame(up, model, "failed: %s", failure)
                    continue
                up.waiting -= 1
                waiting = False
                if not streaming:
                    state["usage"] = tokens_of(first)
                    if response.status < 300 and response.content_type == "application/json":
                        first = rename(first, model)
                    await _send_whole(response, first, send, state)
                    complete = True
                    return response.status
                status = await _relay(model, up, response, first, send, state)
                # llama-server (b11434) closes its connection after a stream
                # while answering "Keep-Alive": a pooled one would fail the
                # next request. Close it ourselves.
                complete = (
                    status != "stream_error" and response.headers.get("Server") != "llama.cpp"
                )
                return status
            finally:
                if waiting:
                    up.waiting -= 1
                up.in_flight -= 1
                if response is not None:
                    if complete:
                        response.release()
                    else:
                        response.close()
        return await _send_failure(model, len(tried), failure, send)


def _stale(exc: BaseException) -> bool:
    return isinstance(exc, _STALE_CONNECTION) and not isinstance(exc, aiohttp.ClientConnectorError)


def _blame(up: Upstream, model: str, what: str, detail: object) -> None:
    up.down_until = time.monotonic() + BACKOFF_S
    log.warning("gateway: %s replica %s " + what, model, up.replica_id, detail)


def _content_type(response: aiohttp.ClientResponse) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", response.headers.get("Content-Type", "application/json").encode())]


async def _send_whole(
    response: aiohttp.ClientResponse, body: bytes, send: Send, state: dict[str, Any]
) -> None:
    headers = _content_type(response) + [(b"content-length", str(len(body)).encode())]
    state["done"] = True
    state["first_at"] = time.perf_counter()
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _relay(
    model: str,
    up: Upstream,
    response: aiohttp.ClientResponse,
    first: bytes,
    send: Send,
    state: dict[str, Any],
) -> int | str:
    """The stream, chunk by chunk as the engine writes it, from its first."""
    state["first_at"] = time.perf_counter()
    await send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": _content_type(response) + _STREAM_HEADERS,
        }
    )
    # Renamed for the client, and its usage read on the way (usage.py).
    renamer = state["meter"] = StreamMeter(model, state.get("drop_usage", False))
    first = renamer.feed(first)
    await send({"type": "http.response.body", "body": first, "more_body": True})
    tail = first[-2:]
    try:
        async for chunk in response.content.iter_any():
            chunk = renamer.feed(chunk)
            if not chunk:
                continue
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tail = chunk[-2:] if len(chunk) > 1 else tail[-1:] + chunk
    except UPSTREAM_ERRORS as exc:
        log.warning("gateway: %s replica %s broke mid-stream: %s", model, up.replica_id, exc)
        rest = renamer.flush()
        if rest:
            tail = (tail + rest)[-2:]
        # Close any event the engine left half-written first.
        lead = b"" if tail == b"\n\n" else (b"\n" if tail.endswith(b"\n") else b"\n\n")
        event = sse_error_event(
            f"The model's replica failed mid-stream: {type(exc).__name__}",
            "upstream_stream_broken",
        )
        state["done"] = True
        await send({"type": "http.response.body", "body": rest + lead + event})
        return "stream_error"
    state["done"] = True
    await send({"type": "http.response.body", "body": renamer.flush()})
    return response.status


async def _send_failure(model: str, tried: int, failure: Failure, send: Send) -> int:
    """No replica answered: the last 5xx as the engine said it, or a 502."""
    if isinstance(failure, tuple):
        status, data, content_type = failure
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", (content_type or "application/json").encode()),
                    (b"content-length", str(len(data)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})
        return status
    await send_error(
        send,
        502,
        f"No replica of `{model}` could be reached ({tried} tried): {failure}",
        "server_error",
        "upstream_unavailable",
    )
    return 502
