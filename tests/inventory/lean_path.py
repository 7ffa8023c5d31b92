"""One POST through heartbeats_first (the agent paths served before
Django), in front of a stand-in for Django that records what it was
handed: what the lean path answered never reaches it, and what it passed
on must arrive with its body intact."""

from __future__ import annotations

import asyncio
from typing import Any

from llmgw.inventory.api.heartbeat_asgi import heartbeats_first
from llmgw.inventory.coalesce import Coalescer


def post(
    path: str,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    chunks: int = 1,
    django: Any = None,
    **scope: Any,
) -> dict[str, Any]:
    """`body` sent in `chunks` messages; returns what Django was handed
    ("handed") and what the client was sent ("sent"). `django`: the app
    behind the lean path, when not the stand-in that records its bodies."""
    handed: list[bytes] = []
    sent: list[dict[str, Any]] = []

    async def stand_in(scope: Any, receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        handed.append(body)

    async def main() -> None:
        coalescer = Coalescer(tick_s=0.0)
        app = heartbeats_first(django or stand_in, coalescer)
        size = max(1, -(-len(body) // chunks))
        parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
        messages = [
            {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
            for i, part in enumerate(parts)
        ]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop(0)
            # The client waits for its answer: Django's handler listens for
            # a disconnect meanwhile, and would drop the answer on one.
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        length = [(b"content-length", str(len(body)).encode())]
        request = {
            "type": "http",
            "path": path,
            "method": "POST",
            "headers": headers + length,
            "query_string": b"",
            "root_path": "",
            "scheme": "http",
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 40000),
            **scope,
        }
        await app(request, receive, send)
        await coalescer.close()

    asyncio.run(main())
    return {"handed": handed, "sent": sent}
