"""Real peers for the gateway tests: engines that answer like an
OpenAI-compatible server, each a real HTTP server (uvicorn in a thread,
tests/servers.py), and the gateway itself served the same way, on the test
database.

`FakeEngine` answers with constant JSON and SSE, and can be told to fail
(500, die mid-stream, stall), to report a queue on /metrics, and to record
that a client hung up on it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.servers import ServerThread

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "text": "hello", "finish_reason": "stop", "logprobs": None}],
}
EMBEDDING = {
    "object": "list",
    "model": "m",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.25, 0.5, 0.75]}],
    "usage": {"prompt_tokens": 1, "total_tokens": 1},
}


def chunk(i: int, name: str) -> bytes:
    event = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": f"{name}{i} "}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


@dataclass
class FakeEngine:
    name: str
    # "ok", "500", "die_mid_stream" (2 chunks, then the connection drops),
    # "stall" (1 chunk, then nothing until the client hangs up), "refuse_stream"
    # (closes the connection before its first byte).
    mode: str = "ok"
    chunks: int = 4
    queue: float | None = None
    hits: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    hung_up: threading.Event = field(default_factory=threading.Event)
    server: ServerThread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/metrics":
            text = "# HELP llamacpp:requests_deferred waiting\n# TYPE llamacpp:requests_deferred gauge\n"
            if self.queue is not None:
                text += f"llamacpp:requests_deferred {self.queue}\n"
            await self._send(send, 200, text.encode(), "text/plain")
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.hits += 1
        request = json.loads(body)
        self.bodies.append(request)
        if self.mode == "500":
            await self._send(send, 500, b'{"error": {"message": "engine on fire"}}')
            return
        if request.get("stream"):
            await self._stream(receive, send)
            return
        answer = {
            "/v1/chat/completions": CHAT,
            "/v1/completions": COMPLETION,
            "/v1/embeddings": EMBEDDING,
        }[path]
        await self._send(send, 200, json.dumps({**answer, "served_by": self.name}).encode())

    async def _stream(self, receive: Any, send: Any) -> None:
        if self.mode == "refuse_stream":
            raise RuntimeError("dies before the first byte")
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        if self.mode == "stall":
            await send(
                {"type": "http.response.body", "body": chunk(0, self.name), "more_body": True}
            )
            while (await receive())["type"] != "http.disconnect":
                pass
            self.hung_up.set()
            return
        count = 2 if self.mode == "die_mid_stream" else self.chunks
        for i in range(count):
            await send(
                {"type": "http.response.body", "body": chunk(i, self.name), "more_body": True}
            )
        if self.mode == "die_mid_stream":
            # An app that raises after the response started: uvicorn drops
            # the connection with the chunked body unterminated.
            raise RuntimeError("engine crashed mid-stream")
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    async def _send(
        self, send: Any, status: int, body: bytes, content_type: str = "application/json"
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type.encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def engines() -> Iterator[Any]:
    started: list[FakeEngine] = []

    def make(name: str, **kwargs: Any) -> FakeEngine:
        engine = FakeEngine(name, **kwargs)
        engine.server = ServerThread(engine).start()
        started.append(engine)
        return engine

    yield make
    for engine in started:
        assert engine.server is not None
        engine.server.stop()


@dataclass
class GatewayServer:
    gateway: Any
    server: ServerThread

    @property
    def url(self) -> str:
        return self.server.url

    def refresh(self) -> None:
        """Reload keys and routes now instead of waiting for the loop."""
        self.server.call(self.gateway.refresh(keys=True))

    def scrape(self) -> None:
        self.server.call(self.gateway.scrape())

    def publish(self) -> None:
        self.server.call(self.gateway.publish())


@pytest.fixture
def gateway_server(transactional_db: Any) -> Iterator[GatewayServer]:
    """The control plane's HTTP app, /v1/ mounted the way llmgw/asgi.py does,
    under uvicorn, with the gateway's background loops off: the tests
    refresh, scrape and publish when they choose, never on a timer."""
    from django.core.asgi import get_asgi_application

    from llmgw.serving.gateway.app import Gateway, mount

    gateway = Gateway(background=False)
    server = ServerThread(mount(gateway, get_asgi_application())).start()
    yield GatewayServer(gateway, server)
    server.call(gateway.stop())
    server.stop()
