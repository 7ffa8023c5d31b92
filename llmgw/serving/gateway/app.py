"""The gateway's ASGI app: authenticate, route, proxy.

Per request: a SHA-256 and a dictionary lookup for the key (one made since
the table loaded is looked up in the database once), a partial JSON
decode for "model" and "stream" (msgspec, skipping the rest), the least
loaded ready replica, and aiohttp to the engine (measured here at about a
ninth of httpx's CPU per request). Bodies pass through untouched; a stream
goes out chunk by chunk as the engine writes it.

A failed replica (refused connection, 5xx, a stream that ends before its
first byte) is retried on another one only while nothing has reached the
client; after that the stream ends with an OpenAI-style error event. A
client that hangs up cancels the task, which closes the engine connection,
so the engine stops generating for nobody.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import msgspec

from llmgw.serving.gateway import load, snapshot
from llmgw.serving.gateway.errors import send_error, send_json, sse_error_event
from llmgw.serving.gateway.routing import BACKOFF_S, Router, Upstream, parse_queue_depth
from llmgw.serving.gateway.snapshot import KeyScope
from llmgw.validation import problems

log = logging.getLogger("llmgw.gateway")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROXIED = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
MAX_BODY_BYTES = 32 * 1024 * 1024
RETRY_AFTER_S = 5
# Unknown keys looked up in one query, at most.
LOOKUP_BATCH = 1000
UPSTREAM_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
_UPSTREAM_HEADERS = {"Content-Type": "application/json"}
_STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
_STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class _Head(msgspec.Struct):
    model: str | None = None
    stream: bool | None = None


_decode_head = msgspec.json.Decoder(_Head).decode
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def _not_found(model: str) -> tuple[str, str, str]:
    # Same words for a model that does not exist and one the key may not
    # use: a key must not be able to probe which models exist.
    return (
        f"The model `{model}` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    )


class Gateway:
    def __init__(
        self,
        *,
        route_refresh_s: float = 1.0,
        # A cut key (revoked, deleted, its owner disabled or deleted) is
        # refused within this and one query: a quarter of the 2 s promised,
        # so a loaded event loop and a slow database fit in the rest.
        key_refresh_s: float = 0.5,
        scrape_s: float = 3.0,
        stale_s: float = 15.0,
        publish_s: float = 1.0,
        connect_timeout_s: float = 3.0,
        read_timeout_s: float = 600.0,
        background: bool = True,
    ) -> None:
        self.route_refresh_s = route_refresh_s
        self.key_refresh_s = key_refresh_s
        self.scrape_s = scrape_s
        self.publish_s = publish_s
        self.timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self.background = background
        self.router = Router(stale_s)
        self.keys: dict[str, KeyScope] = {}
        self.created: dict[str, int] = {}
        self.keys_loaded_at = 0.0
        # Per model, per status: this process's answers since it started.
        self.requests: dict[str, dict[str, int]] = {}
        self.retries = 0
        self._refused: dict[str, int] = {}
        self._used_keys: set[int] = set()
        # Digests looked up in the database since the table last loaded,
        # awaiting one shared query; and digests no usable key will ever
        # have (a key is 256 random bits made by this control plane, and a
        # revoked one stays revoked: absent now is absent for good, so a
        # client retrying a wrong key costs one query). A disabled user's
        # key can come back: it is "held", forgotten at every table load.
        self._missing: dict[str, asyncio.Future[KeyScope | None]] = {}
        self._lookup: asyncio.Task[None] | None = None
        self._strangers: set[str] = set()
        self._held: set[str] = set()
        self.key_lookups = 0
        self._touched_at = 0.0
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession
        self._db: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._start_lock: asyncio.Lock | None = None
        self._started = False

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            self._db = ThreadPoolExecutor(1, thread_name_prefix="llmgw-gateway-db")
            self._session = aiohttp.ClientSession(
                # Idle connections are dropped before the engines drop them
                # (llama-server and uvicorn both close after 5 s idle): a
                # connection closed under us fails the request sent on it.
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=3),
                timeout=self.timeout,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
            # For the one retry after a pooled connection turned out closed.
            self._fresh = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True),
                timeout=self.timeout,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
            try:
                await self.refresh()
            except Exception:
                log.exception("gateway: first load from the database failed; retrying")
            if self.background:
                self._tasks = [
                    asyncio.create_task(self._every(self.key_refresh_s, self.refresh_keys)),
                    asyncio.create_task(self._every(self.route_refresh_s, self.refresh_routes)),
                    asyncio.create_task(self._every(self.scrape_s, self.scrape)),
                    asyncio.create_task(self._every(self.publish_s, self.publish)),
                ]
            self._started = True

    async def stop(self) -> None:
        """Stop the loops and close connections; `start` may follow, on another loop."""
        tasks = self._tasks + ([self._lookup] if self._lookup is not None else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks, self._lookup, self._missing = [], None, {}
        if self._session is not None:
            await self._session.close()
            await self._fresh.close()
            self._session = None
        if self._db is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._db, load.withdraw)
            await loop.run_in_executor(self._db, snapshot.close)
            self._db.shutdown()
            self._db = None
        self._start_lock = None
        self._started = False

    async def _every(self, seconds: float, job: Callable[[], Awaitable[None]]) -> None:
        # On a fixed beat, not `seconds` after the last run ended: a slow
        # query or a busy loop must not stretch the cycle, which is a cut
        # key's grace. One that falls a whole beat behind starts afresh
        # rather than running back to back to catch up.
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += seconds
            await asyncio.sleep(due - loop.time())
            if loop.time() - due > seconds:
                due = loop.time()
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                # Keep serving from the last good table; say so once a cycle.
                log.exception("gateway: %s failed", getattr(job, "__name__", job))

    async def _in_db_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._db is not None
        return await asyncio.get_running_loop().run_in_executor(self._db, fn, *args)

    async def refresh(self, keys: bool = True) -> None:
        """Routes, and keys unless told not to: both now, not on their beat."""
        if self._db is None:
            await self.start()  # which loads both
            return
        await self.refresh_routes()
        if keys:
            await self.refresh_keys()

    async def refresh_keys(self) -> None:
        started = time.monotonic()
        self.keys = await self._in_db_thread(snapshot.load_keys_now)
        self._held = set()
        self.keys_loaded_at = started

    async def refresh_routes(self) -> None:
        models, routes = await self._in_db_thread(snapshot.load_routes_now)
        self.created = models
        self.router.update(frozenset(models), routes)

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

    async def publish(self) -> None:
        depth = self.router.queue_depths()
        refused, self._refused = self._refused, {}
        for model, count in refused.items():
            depth[model] = depth.get(model, 0.0) + count
        requests = {m: dict(codes) for m, codes in self.requests.items()}
        await self._in_db_thread(load.publish, depth, self.router.in_flight(), requests)
        now = time.monotonic()
        if self._used_keys and now - self._touched_at >= 60:
            used, self._used_keys = self._used_keys, set()
            self._touched_at = now
            await self._in_db_thread(snapshot.touch_keys, used)

    # -- requests --------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not self._started:
            await self.start()
        path, method = scope["path"], scope["method"]
        if path in PROXIED:
            if method != "POST":
                await send_error(
                    send,
                    405,
                    f"{method} {path}: use POST",
                    "invalid_request_error",
                    "method_not_allowed",
                )
                return
            await self._proxied(scope, receive, send)
        elif path == "/v1/models" or path.startswith("/v1/models/"):
            await self._models(scope, send, path[len("/v1/models/") :] if len(path) > 10 else None)
        else:
            await send_error(
                send,
                404,
                f"Unknown request URL: {method} {path}.",
                "invalid_request_error",
                "unknown_url",
            )

    async def _key(self, scope: Scope) -> KeyScope | None:
        for name, value in scope["headers"]:
            if name == b"authorization":
                if value[:7].lower() != b"bearer ":
                    return None
                digest = hashlib.sha256(value[7:].strip()).hexdigest()
                found = self.keys.get(digest)
                if (
                    found is not None
                    or not self.router.loaded
                    or digest in self._strangers
                    or digest in self._held
                ):
                    return found
                # Not in the table: perhaps made since it loaded. `keys
                # create` returning means the key is committed, so the
                # database says; the next request must not be refused.
                return await self._look_up(digest)
        return None

    async def _look_up(self, digest: str) -> KeyScope | None:
        waiting = self._missing.get(digest)
        if waiting is None:
            waiting = self._missing[digest] = asyncio.get_running_loop().create_future()
            if self._lookup is None or self._lookup.done():
                self._lookup = asyncio.create_task(self._look_up_missing())
        return await asyncio.shield(waiting)

    async def _look_up_missing(self) -> None:
        """Every digest missed meanwhile, in one query per round: a flood of
        wrong keys queues behind one lookup, not one query each."""
        while self._missing:
            batch = dict(itertools.islice(self._missing.items(), LOOKUP_BATCH))
            for digest in batch:
                del self._missing[digest]
            started = time.monotonic()
            self.key_lookups += 1
            try:
                found, held = await self._in_db_thread(snapshot.look_up, list(batch))
            except Exception:
                # Refused as before this lookup existed; never remembered as
                # a stranger, so the next request asks again.
                log.exception("gateway: looking up %d key(s) failed", len(batch))
                for waiting in batch.values():
                    if not waiting.done():
                        waiting.set_result(None)
                continue
            # A table loaded after this query began is newer (a key revoked
            # meanwhile is out of it): add to it only what it cannot know.
            fresh = self.keys_loaded_at <= started
            for digest, waiting in batch.items():
                key = found.get(digest)
                if key is None and digest in held:
                    if fresh:
                        self._held.add(digest)
                elif key is None:
                    if len(self._strangers) >= 100_000:
                        self._strangers.clear()  # bounded; a stranger then costs one more query
                    self._strangers.add(digest)
                elif fresh:
                    self.keys[digest] = key
                if not waiting.done():
                    waiting.set_result(key)

    async def _refuse_key(self, send: Send) -> None:
        if not self.router.loaded:
            await send_error(
                send,
                503,
                "The gateway has not loaded its keys yet.",
                "server_error",
                "gateway_starting",
                headers=[(b"retry-after", b"1")],
            )
            return
        await send_error(
            send,
            401,
            "Incorrect API key provided. Give a valid llmgw key as `Authorization: Bearer <key>`.",
            "invalid_request_error",
            "invalid_api_key",
        )

    async def _models(self, scope: Scope, send: Send, one: str | None) -> None:
        key = await self._key(scope)
        if key is None:
            await self._refuse_key(send)
            return
        if scope["method"] != "GET":
            await send_error(send, 405, "use GET", "invalid_request_error", "method_not_allowed")
            return
        allowed = sorted(m for m in self.created if key.allows(m))
        entries = [
            {"id": m, "object": "model", "created": self.created[m], "owned_by": "llmgw"}
            for m in allowed
        ]
        if one is None:
            await send_json(send, 200, _encode({"object": "list", "data": entries}))
            return
        for entry in entries:
            if entry["id"] == one:
                await send_json(send, 200, _encode(entry))
                return
        await send_error(send, 404, *_not_found(one), param="model")

    def _count(self, model: str, status: int | str) -> None:
        codes = self.requests.get(model)
        if codes is None:
            codes = self.requests[model] = {}
        key = str(status)
        codes[key] = codes.get(key, 0) + 1

    async def _proxied(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = await self._key(scope)
        if key is None:
            await self._refuse_key(send)
            return
        try:
            body = await _read_body(receive)
        except _TooLarge:
            await send_error(
                send,
                413,
                f"Request body over {MAX_BODY_BYTES} bytes.",
                "invalid_request_error",
                "request_too_large",
            )
            return
        if body is None:
            return
        refused = _unclean(body)
        if refused is not None:
            await send_error(send, 400, *refused)
            return
        try:
            head = _decode_head(body)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            # msgspec recurses once per level, skipped fields too.
            said = "nested too deeply" if isinstance(exc, RecursionError) else exc
            await send_error(
                send, 400, f"Invalid request body: {said}", "invalid_request_error", "invalid_json"
            )
            return
        model = head.model
        if not model:
            await send_error(
                send,
                400,
                "You must provide a model parameter.",
                "invalid_request_error",
                None,
                "model",
            )
            return
        router = self.router
        if not key.allows(model) or (model not in router.models and model not in router.table):
            await send_error(send, 404, *_not_found(model), param="model")
            return
        if not router.table.get(model):
            self._refused[model] = self._refused.get(model, 0) + 1
            self._count(model, 503)
            await send_error(
                send,
                503,
                f"The model `{model}` has no ready replica right now; retry shortly.",
                "server_error",
                "no_ready_replica",
                headers=[(b"retry-after", str(RETRY_AFTER_S).encode())],
            )
            return
        self._used_keys.add(key.id)
        path = scope["path"]
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("latin-1")

        # The client hanging up cancels this task: the engine connection
        # closes with it and the engine stops generating.
        task = asyncio.current_task()
        assert task is not None
        state = {"done": False, "hung_up": False}

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not state["done"]:
                        state["hung_up"] = True
                        task.cancel()
                    return

        watcher = asyncio.create_task(watch())
        try:
            status = await self._forward(model, path, body, bool(head.stream), send, state)
            self._count(model, status)
        except asyncio.CancelledError:
            if not state["hung_up"]:
                raise
            task.uncancel()
            self._count(model, 499)
        finally:
            state["done"] = True
            watcher.cancel()

    async def _forward(
        self, model: str, path: str, body: bytes, stream: bool, send: Send, state: dict[str, bool]
    ) -> int | str:
        session = self._session
        assert session is not None
        tried: list[Upstream] = []
        failure: tuple[int, bytes, str] | str = "no replica answered"
        fresh_connection_tried = False
        while (up := self.router.pick(model, tried)) is not None:
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
                        up.down_until = time.monotonic() + BACKOFF_S
                        log.warning(
                            "gateway: %s replica %s answered %s",
                            model,
                            up.replica_id,
                            response.status,
                        )
                        continue
                    streaming = stream and response.content_type == "text/event-stream"
                    first = await (response.content.readany() if streaming else response.read())
                    if streaming and not first:
                        raise aiohttp.ClientPayloadError("the stream ended before its first byte")
                except UPSTREAM_ERRORS as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                    if (
                        response is None
                        and not fresh_connection_tried
                        and isinstance(exc, _STALE_CONNECTION)
                        and not isinstance(exc, aiohttp.ClientConnectorError)
                    ):
                        # A pooled connection the engine had closed: the
                        # request never reached it. Once, the same replica
                        # again on a new connection, without blaming it.
                        fresh_connection_tried = True
                        tried.pop()
                        continue
                    up.down_until = time.monotonic() + BACKOFF_S
                    log.warning("gateway: %s replica %s failed: %s", model, up.replica_id, failure)
                    continue
                up.waiting -= 1
                waiting = False
                headers = [
                    (
                        b"content-type",
                        response.headers.get("Content-Type", "application/json").encode(),
                    )
                ]
                if not streaming:
                    headers.append((b"content-length", str(len(first)).encode()))
                    state["done"] = True
                    await send(
                        {
                            "type": "http.response.start",
                            "status": response.status,
                            "headers": headers,
                        }
                    )
                    await send({"type": "http.response.body", "body": first})
                    complete = True
                    return response.status
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status,
                        "headers": headers + _STREAM_HEADERS,
                    }
                )
                await send({"type": "http.response.body", "body": first, "more_body": True})
                tail = first[-2:]
                try:
                    async for chunk in response.content.iter_any():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        tail = chunk[-2:] if len(chunk) > 1 else tail[-1:] + chunk
                except UPSTREAM_ERRORS as exc:
                    log.warning(
                        "gateway: %s replica %s broke mid-stream: %s", model, up.replica_id, exc
                    )
                    # Close any event the engine left half-written first.
                    lead = b"" if tail == b"\n\n" else (b"\n" if tail.endswith(b"\n") else b"\n\n")
                    event = sse_error_event(
                        f"The model's replica failed mid-stream: {type(exc).__name__}",
                        "upstream_stream_broken",
                    )
                    state["done"] = True
                    await send({"type": "http.response.body", "body": lead + event})
                    return "stream_error"
                state["done"] = True
                await send({"type": "http.response.body", "body": b""})
                # llama-server (b11434) closes its connection after a stream
                # while answering "Keep-Alive": a pooled one would fail the
                # next request. Close it ourselves.
                complete = response.headers.get("Server") != "llama.cpp"
                return response.status
            finally:
                if waiting:
                    up.waiting -= 1
                up.in_flight -= 1
                if response is not None:
                    if complete:
                        response.release()
                    else:
                        response.close()
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
            f"No replica of `{model}` could be reached ({len(tried)} tried): {failure}",
            "server_error",
            "upstream_unavailable",
        )
        return 502


class _TooLarge(Exception):
    pass


def _unclean(body: bytes) -> tuple[str, str, str, str | None] | None:
    """Why a body the engine would get is not clean text (llmgw.validation),
    as send_error's arguments; None when it is. The body is forwarded as it
    came, so it is checked as bytes: UTF-8 (ASCII at memory speed), and a
    NUL, which JSON can only spell as an escape, looked for before anything
    is decoded to find which field holds it."""
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return (
                f"Invalid request body: not UTF-8 at byte {exc.start}",
                "invalid_request_error",
                "invalid_json",
                None,
            )
    if b"\\u0000" not in body:
        return None
    try:
        errors = problems(_decode_any(body))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None  # the head decoder says what is wrong with it
    for field, messages in errors.items():
        return (f"`{field}` {messages[0]}.", "invalid_request_error", "invalid_value", field)
    return None  # an escaped backslash before "u0000": no NUL after all


async def _read_body(receive: Receive) -> bytes | None:
    """The request body; None when the client left before sending it all."""
    message = await receive()
    if message["type"] == "http.disconnect":
        return None
    body = message.get("body", b"")
    if not message.get("more_body"):
        if len(body) > MAX_BODY_BYTES:
            raise _TooLarge
        return body
    parts, size = [body], len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if size > MAX_BODY_BYTES:
            raise _TooLarge
        if not message.get("more_body"):
            return b"".join(parts)


def mount(gateway: Gateway, app: ASGIApp) -> ASGIApp:
    """`app` for every path but /v1/..., which goes to the gateway without
    passing through Django."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"].startswith("/v1/"):
            await gateway(scope, receive, send)
        else:
            await app(scope, receive, send)

    return route
