"""The simulated fleet's shards: started, ready, and answered by one endpoint.

Without this a simulated node reports every shard pending, so nothing routes
to it and a drain, which waits for a replacement to be ready before it
releases the old replica, waits forever. With `llmgw simulate --serve-shards`
each node takes its desired shards through the states a real agent reports
(starting, then ready after a short jittered delay, as an engine loads) and
gives, as the agent gives its engine's host:port, the one small
OpenAI-compatible endpoint the simulator runs for the whole fleet.

That endpoint answers what the agent and the gateway ask an engine
(/health, /v1/models, /v1/chat/completions, /v1/completions), on the
simulator's event loop beside the nodes, and every answer says plainly that
it comes from a simulated node and that no model ran: a demo must never pass
a canned sentence off as a model's answer.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from llmgw_agent.shards.command import advertised_host, url_for

# Seconds from a shard's start to ready: a jittered load time, short
# enough that a drain on the demo moves a replica in a few heartbeats.
READY_AFTER_S = (2.0, 6.0)
OWNER = "llmgw-simulator"
ENDPOINTS = "/health, /v1/models, /v1/chat/completions and /v1/completions"


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Started:
    generation: int | None
    model: str
    rank: int
    ready_at: float
    since: str
    ready: bool = False


@dataclass
class Endpoint:
    """The one HTTP endpoint every simulated node's ready shards give as
    theirs, and which nodes hold a ready shard of which model."""

    host: str = "127.0.0.1"
    port: int = 0
    # The address shard reports name: the host nodes register from (the
    # control plane refuses a shard URL naming any other).
    advertise: str | None = None
    # node -> shard id -> model, for the ready rank-0 shards (the ones the
    # gateway sends requests to).
    ready: dict[str, dict[str, str]] = field(default_factory=dict)
    created: int = field(default_factory=lambda: int(time.time()))
    # What shard reports give as their URL, once started.
    url: str = ""
    _runner: web.AppRunner | None = None

    # Copies first: a test may report shards from another thread meanwhile.
    def nodes_serving(self, model: str) -> list[str]:
        return sorted(n for n, shards in list(self.ready.items()) if model in shards.values())

    def models(self) -> list[str]:
        return sorted({m for shards in list(self.ready.values()) for m in shards.values()})

    def life(self, node: str, rng: random.Random | None = None) -> ShardLife:
        """The shard states of one simulated node, reporting this endpoint."""
        return ShardLife(node, self, rng or random.Random(node))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise SystemExit(
                f"--serve-host/--serve-port: cannot listen on {self.host}:{self.port}: "
                f"{exc.strerror or exc}"
            ) from None
        # Port 0 asked the kernel for one: the reports must name the one it gave.
        self.port = int(self._runner.addresses[0][1])
        self.url = url_for(advertised_host(self.host, self.advertise), self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- answers -----------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "simulated": True})

    async def _models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": self.created, "owned_by": OWNER}
            for m in self.models()
        ]
        return web.json_response({"object": "list", "data": data})

    async def _unknown(self, request: web.Request) -> web.Response:
        return error(404, f"the simulator's endpoint answers {ENDPOINTS} only", "not_found")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=True)

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=False)

    async def _answer(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError) as exc:
            return error(400, f"the request body is not JSON: {exc}", "invalid_json")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return error(400, "model: a model name is required", "invalid_request")
        model = body["model"]
        nodes = self.nodes_serving(model)
        if not nodes:
            return error(
                404,
                f"no simulated node holds a ready shard of `{model}`",
                "model_not_found",
            )
        text = simulated_text(model, nodes)
        if body.get("stream") is True:
            return await _stream(request, model, text, chat)
        return web.json_response(_whole(model, text, chat))


def simulated_text(model: str, nodes: list[str]) -> str:
    """What a simulated shard says instead of an answer. The endpoint is one
    for the whole fleet, so when several nodes hold ready shards of the model
    it cannot tell which one the gateway picked, and says so."""
    if len(nodes) == 1:
        where = f"simulated node {nodes[0]}: no engine runs here"
    else:
        where = (
            f"simulated nodes {', '.join(nodes)} (the gateway picked one of them): "
            "no engine runs on any of them"
        )
    return f"{where}; this is not an answer from {model}"


def error(status: int, message: str, code: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return web.json_response(body, status=status)


def _whole(model: str, text: str, chat: bool) -> dict[str, Any]:
    created = int(time.time())
    if chat:
        choice: dict[str, Any] = {"message": {"role": "assistant", "content": text}}
        kind, prefix = "chat.completion", "chatcmpl"
    else:
        choice, kind, prefix = {"text": text, "logprobs": None}, "text_completion", "cmpl"
    # No usage: no tokens were counted, and a count of zero would claim some were.
    return {
        "id": f"{prefix}-simulated-{created}",
        "object": kind,
        "created": created,
        "model": model,
        "system_fingerprint": OWNER,
        "choices": [{"index": 0, **choice, "finish_reason": "stop"}],
    }


async def _stream(request: web.Request, model: str, text: str, chat: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    created = int(time.time())
    kind = "chat.completion.chunk" if chat else "text_completion"
    first: dict[str, Any] = (
        {"delta": {"role": "assistant", "content": text}} if chat else {"text": text}
    )
    last: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
    for choice, reason in ((first, None), (last, "stop")):
        event = {
            "id": f"chatcmpl-simulated-{created}" if chat else f"cmpl-simulated-{created}",
            "object": kind,
            "created": created,
            "model": model,
            "system_fingerprint": OWNER,
            "choices": [{"index": 0, **choice, "finish_reason": reason}],
        }
        await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


class ShardLife:
    """One simulated node's shards, reported as its agent would: a shard it
    is newly told to run (or told again with a new generation) is starting,
    and ready once its jittered load time has passed; one no longer wanted
    is gone, as an engine that stopped at once."""

    def __init__(
        self,
        node: str,
        endpoint: Endpoint,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node, self.endpoint, self.rng, self.clock = node, endpoint, rng, clock
        self.started: dict[str, _Started] = {}

    def report(self, desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The heartbeat's `shards` for these desired shards, now."""
        now = self.clock()
        wanted = {sh["id"]: sh for sh in desired}
        self.started = {k: v for k, v in self.started.items() if k in wanted}
        out = []
        for shard_id, sh in wanted.items():
            s = self.started.get(shard_id)
            if s is None or s.generation != sh.get("generation"):
                s = self.started[shard_id] = _Started(
                    sh.get("generation"),
                    str(sh.get("model") or ""),
                    int(sh.get("rank") or 0),
                    now + self.rng.uniform(*READY_AFTER_S),
                    _now_iso(),
                )
            if not s.ready and now >= s.ready_at:
                s.ready, s.since = True, _now_iso()
            out.append(self._entry(shard_id, sh, s))
        self.endpoint.ready[self.node] = {
            k: s.model for k, s in self.started.items() if s.ready and s.rank == 0
        }
        return out

    def _entry(self, shard_id: str, sh: dict[str, Any], s: _Started) -> dict[str, Any]:
        engine = sh.get("engine") or "its engine"
        message = (
            "simulated node: no engine runs here; the simulator's endpoint answers, saying so"
            if s.ready
            else f"simulated node: starting, as {engine} would load {s.model}"
        )
        return {
            "id": shard_id,
            "replica": sh.get("replica"),
            "state": "ready" if s.ready else "starting",
            "url": self.endpoint.url,
            "pid": None,
            "restarts": 0,
            "generation": sh.get("generation"),
            "message": message,
            "since": s.since,
        }
