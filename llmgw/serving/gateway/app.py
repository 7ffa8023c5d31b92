"""The gateway's ASGI app: authenticate, route, proxy.

Per request: a SHA-256 and a dictionary lookup for the key (keys.py), a
partial JSON decode for "model" and "stream" (body.py), a turn (flow.py:
at once while the model has room, else a wait in its queue), the least
loaded ready replica, and aiohttp to the engine (proxy.py).

A client that hangs up cancels the task, which closes the engine
connection, so the engine stops generating for nobody.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import msgspec
from django.conf import settings

from llmgw.serving.gateway import load, metrics, snapshot
from llmgw.serving.gateway.asgi import ASGIApp, Receive, Scope, Send
from llmgw.serving.gateway.body import read_request
from llmgw.serving.gateway.errors import send_error, send_json
from llmgw.serving.gateway.flow import Admission, Flow, turn_away
from llmgw.serving.gateway.keys import KeyTable
from llmgw.serving.gateway.limits import Limiter, Ticket, refusal
from llmgw.serving.gateway.proxy import Proxy
from llmgw.serving.gateway.routing import Router
from llmgw.serving.gateway.snapshot import KeyScope
from llmgw.serving.gateway.usage import Meter, ask_for_usage, reported, save

log = logging.getLogger("llmgw.gateway")

PROXIED = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
RETRY_AFTER_S = 5

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
        self.background = background
        self.router = Router(stale_s)
        self.proxy = Proxy(
            self.router,
            aiohttp.ClientTimeout(
                total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
            ),
        )
        self.keys = KeyTable(self._in_db_thread)
        # Per key: limits counted in Redis, usage saved in batches (limits.py, usage.py).
        self.limits = Limiter(settings.REDIS_URL)
        self.usage = Meter()
        self.flow = Flow(
            settings.GATEWAY_REPLICA_CONCURRENCY,
            settings.GATEWAY_QUEUE_LENGTH,
            float(settings.GATEWAY_QUEUE_WAIT_S),
        )
        self.created: dict[str, int] = {}
        # Per model, per status: this process's answers since it started.
        self.requests: dict[str, dict[str, int]] = {}
        # Per model (and status): this process's latency histograms since it started.
        self.durations: dict[str, dict[str, metrics.Row]] = {}
        self.first_bytes: dict[str, metrics.Row] = {}
        self._refused: dict[str, int] = {}
        # Each publish's refusals, kept for RETRY_AFTER_S (see publish).
        self._refusals: deque[tuple[float, dict[str, int]]] = deque()
        self._used_keys: set[int] = set()
        self._touched_at = 0.0
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
            self.proxy.open()
            self.limits.open()
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
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.keys.stop()
        await self.limits.close()
        await self.proxy.close()
        if self._db is not None:
            await self.save_usage()
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
        await self.keys.load()

    async def refresh_routes(self) -> None:
        models, routes = await self._in_db_thread(snapshot.load_routes_now)
        coming = await self._in_db_thread(snapshot.load_coming)
        self.created = models
        self.router.update(frozenset(models), routes)
        # Then the queues move, onto the replicas that just became ready.
        self.flow.update(self.router.table, coming)

    async def save_usage(self) -> None:
        """Usage since the last save, added to the database's; kept on
        failure, and the load published all the same."""
        batch = self.usage.take()
        if not batch:
            return
        try:
            await self._in_db_thread(save, batch)
        except Exception as exc:
            self.usage.put_back(batch, exc)

    async def scrape(self) -> None:
        await self.proxy.scrape()

    async def publish(self) -> None:
        await self.limits.renew()
        await self.save_usage()
        depth = self.router.queue_depths()
        # A refused client was told to come back in RETRY_AFTER_S: it is
        # still waiting for that long, so its request counts as load until
        # then. Counted for one second only, a client that retried as told
        # showed in one publish of five, and the reconciler's tick mostly
        # read a model with no replica as idle.
        now = time.monotonic()
        refused, self._refused = self._refused, {}
        self._refusals.append((now, refused))
        while self._refusals and now - self._refusals[0][0] >= RETRY_AFTER_S:
            self._refusals.popleft()
        for _, counts in self._refusals:
            for model, count in counts.items():
                depth[model] = depth.get(model, 0.0) + count
        # Requests waiting in this process's queues are load like any other:
        # with no replica they place the first one.
        for model, count in self.flow.depths().items():
            depth[model] = depth.get(model, 0.0) + count
        requests = {m: dict(codes) for m, codes in self.requests.items()}
        latency = metrics.latency_report(self.durations, self.first_bytes)
        routing = {m: dict(p) for m, p in self.router.affinity.decisions.items()}
        await self._in_db_thread(
            load.publish, depth, self.router.in_flight(), requests, None, latency, routing
        )
        if self.flow.starved():
            # Requests wait for a model with no replica: the reconciler reads
            # the load just published now, not at its next tick.
            await self._in_db_thread(_reconcile_soon)
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

    async def _key(self, scope: Scope, send: Send) -> KeyScope | None:
        """The request's key, or None once the client was told why not."""
        key = await self.keys.find(scope, self.router.loaded)
        if key is not None:
            return key
        if not self.router.loaded:
            await send_error(
                send,
                503,
                "The gateway has not loaded its keys yet.",
                "server_error",
                "gateway_starting",
                headers=[(b"retry-after", b"1")],
            )
            return None
        await send_error(
            send,
            401,
            "Incorrect API key provided. Give a valid llmgw key as `Authorization: Bearer <key>`.",
            "invalid_request_error",
            "invalid_api_key",
        )
        return None

    async def _models(self, scope: Scope, send: Send, one: str | None) -> None:
        key = await self._key(scope, send)
        if key is None:
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

    def _count(self, model: str, status: int | str, started: float) -> None:
        codes = self.requests.get(model)
        if codes is None:
            codes = self.requests[model] = {}
        key = str(status)
        codes[key] = codes.get(key, 0) + 1
        durations = self.durations.get(model)
        if durations is None:
            durations = self.durations[model] = {}
        metrics.observe(durations, key, time.perf_counter() - started)

    async def _proxied(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        key = await self._key(scope, send)
        if key is None:
            return
        request = await read_request(receive, send)
        if request is None:
            return
        body, head, model = request
        router = self.router
        if not key.allows(model) or (model not in router.models and model not in router.table):
            await send_error(send, 404, *_not_found(model), param="model")
            return
        # The key's limits before the queue: a key over them must not take
        # places in the queue from other keys' requests, nor wait to be told.
        ticket = await self.limits.admit(key) if key.limits is not None else None
        if ticket is not None and ticket.refused:
            await self._over_limit(ticket, model, send, started)
            return
        admission = await self.flow.admit(model, receive)
        if admission is not Admission.GO:
            if ticket is not None:
                await self.limits.finish(ticket, 0)
            if admission is not Admission.GONE:
                self._refused[model] = self._refused.get(model, 0) + 1
            status = await turn_away(send, model, admission, RETRY_AFTER_S)
            self._count(model, status, started)
            return
        try:
            self._used_keys.add(key.id)
            path = scope["path"]
            if scope.get("query_string"):
                path += "?" + scope["query_string"].decode("latin-1")
            await self._forward(
                model, path, body, bool(head.stream), receive, send, started, key.id, ticket
            )
        finally:
            self.flow.release(model)

    async def _over_limit(self, ticket: Ticket, model: str, send: Send, started: float) -> None:
        self._count(model, 429, started)
        await send_error(
            send,
            429,
            refusal(ticket),
            "tokens" if ticket.refused == "tokens" else "requests",
            "rate_limit_exceeded",
            headers=ticket.headers,
        )

    async def _forward(
        self,
        model: str,
        path: str,
        body: bytes,
        stream: bool,
        receive: Receive,
        send: Send,
        started: float,
        key_id: int = 0,
        ticket: Ticket | None = None,
    ) -> None:
        # The client hanging up cancels this task: the engine connection
        # closes with it and the engine stops generating.
        task = asyncio.current_task()
        assert task is not None
        # The proxy adds "first_at", when a replica's answer starts out.
        state: dict[str, Any] = {"done": False, "hung_up": False}
        if stream and not path.startswith("/v1/embeddings"):
            body, state["drop_usage"] = ask_for_usage(body)
        if ticket is not None:
            send = self.limits.sending(send, ticket, state)

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
            status = await self.proxy.forward(model, path, body, stream, send, state)
            self._count(model, status, started)
        except asyncio.CancelledError:
            if not state["hung_up"]:
                raise
            task.uncancel()
            self._count(model, 499, started)
        finally:
            state["done"] = True
            watcher.cancel()
            tokens = reported(state)
            self.usage.add(key_id, model, tokens)
            if ticket is not None:
                await self.limits.finish(ticket, sum(tokens or ()))
            first_at = state.get("first_at")
            if first_at is not None:
                metrics.observe(self.first_bytes, model, first_at - started)


def _reconcile_soon() -> None:
    # Imported on first use: the reconciler and placement behind it are
    # nothing a process that never queues for a model at zero needs.
    from llmgw.serving.tasks import reconcile_soon

    reconcile_soon()


def mount(gateway: Gateway, app: ASGIApp) -> ASGIApp:
    """`app` for every path but /v1/..., which goes to the gateway without
    passing through Django."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"].startswith("/v1/"):
            await gateway(scope, receive, send)
        else:
            await app(scope, receive, send)

    return route
