"""POST /api/agent/v1/heartbeat before Django, as the gateway's /v1/ is.

Django's middleware, URL resolution and request objects cost more per
heartbeat than decoding and storing it, and at 1,000 heartbeats a second
on two cores that is the budget gone. A valid heartbeat with its own
node's credential is read here straight from ASGI, decoded by msgspec
into the protocol's Heartbeat (agent_request), and handed to the process's
Coalescer, which stores it in one statement with the others of its tick
and answers once that has committed.

This is the one way a heartbeat is stored from HTTP. It only ever answers
"stored, and here is your answer". Everything else (another method, a
client certificate, no or a malformed credential, a body over the limit
or not a valid heartbeat, another node's name, a credential the statement
did not authenticate) is handed to Django, body and all, before anything
is written, where DRF's HeartbeatView, the endpoint the API's schema
documents, answers: 401, 413, 400 naming every bad field, 403 with its
audit record (and, for a certificate's node, 200). A credential the
statement refused is handed on marked so (agent_request.REFUSED): one
decode and one round trip is all a wrong credential costs. Each answer
names the code that gave it (agent_request.SERVED_BY). Joins and
registrations take the same way, served by agent_asgi.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec
from django.db import InterfaceError, OperationalError
from django.utils import timezone
from llmgw_agent.protocol.messages import Heartbeat, Join, Registration

from llmgw.accounts import hashing
from llmgw.inventory.api import agent_asgi, agent_request, security
from llmgw.inventory.api.agent_views import HeartbeatView
from llmgw.inventory.coalesce import Coalescer

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Lean = Callable[[Scope, Receive, Send], Awaitable[list[Message] | None]]

PATH = "/api/agent/v1/heartbeat"
RETRY_AFTER_S = 5
_encode = msgspec.json.Encoder().encode
# What DRF's view adds to its answers (its renderer's content negotiation
# and the methods it serves), so a client cannot tell the two apart.
_ALLOW = ", ".join(HeartbeatView().allowed_methods).encode()


def _headers(
    scope: Scope, body: bytes, extra: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"vary", b"Accept"),
        (b"allow", _ALLOW),
        (agent_request.SERVED_BY.lower().encode(), b"lean"),
        *extra,
        *security.headers(scope),
    ]


async def _answer(
    scope: Scope, send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    headers = _headers(scope, body, extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _outage(scope: Scope, send: Send) -> None:
    # As llmgw.outage answers for Django: the agents fail over on a 503.
    body = _encode(
        {
            "detail": "the control plane's database cannot be reached; retry shortly",
            "retry_after_s": RETRY_AFTER_S,
        }
    )
    await _answer(scope, send, 503, body, [(b"retry-after", str(RETRY_AFTER_S).encode())])


class _Route:
    """The ASGI app heartbeats_first returns; its Coalescer is the process's."""

    def __init__(self, app: ASGIApp, coalescer: Coalescer) -> None:
        self.app = app
        self.coalescer = coalescer
        self.lean: dict[str, Lean] = {
            PATH: partial(_lean, coalescer=coalescer),
            agent_asgi.JOIN: _lean_join,
            agent_asgi.REGISTER: _lean_register,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        serve = self.lean.get(scope["path"]) if scope["type"] == "http" else None
        if serve is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        messages = await serve(scope, receive, send)
        if messages is None:
            return

        async def replay() -> Message:
            # What was read here, then the connection's own messages.
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def heartbeats_first(app: ASGIApp, coalescer: Coalescer | None = None) -> _Route:
    """`app` for everything but a heartbeat this path can store itself, and
    a join or registration it can serve itself (agent_asgi)."""
    return _Route(app, coalescer or Coalescer())


async def _lean(
    scope: Scope, receive: Receive, send: Send, coalescer: Coalescer
) -> list[Message] | None:
    """None once answered; else the messages read, for Django to read again."""
    credential = agent_request.scope_credential(scope)
    if credential is None or not agent_request.declared_within_limit(scope):
        return []
    messages, body = await agent_request.read_body(receive)
    data = None if body is None else agent_request.decode(body, Heartbeat)
    if data is None or data["node"] != credential.name:
        return messages
    digest = hashing.digest(credential.secret)
    try:
        answer = await coalescer.submit(credential.name, digest, data, timezone.now())
    except (OperationalError, InterfaceError):
        await _outage(scope, send)
        return None
    if answer is None:
        # The statement authenticated nobody: Django answers the 401 from
        # this, without asking the database again.
        scope[agent_request.REFUSED] = credential.text
        return messages
    await _answer(scope, send, 200, _encode(answer), [])
    return None


async def _lean_join(scope: Scope, receive: Receive, send: Send) -> list[Message] | None:
    """None once answered; else the messages read, for Django to read again."""
    if not agent_request.declared_within_limit(scope):
        return []
    messages, body = await agent_request.read_body(receive)
    data = None if body is None else agent_request.read(body, Join)[0]
    if data is None:
        return messages
    try:
        status, answer = await agent_asgi.run(agent_asgi.join, data)
    except (OperationalError, InterfaceError):
        await _outage(scope, send)
        return None
    await _answer(scope, send, status, _encode(answer), [])
    return None


async def _lean_register(scope: Scope, receive: Receive, send: Send) -> list[Message] | None:
    """None once answered; else the messages read, for Django to read again."""
    credential = agent_request.scope_credential(scope)
    if credential is None or not agent_request.declared_within_limit(scope):
        return []
    messages, body = await agent_request.read_body(receive)
    data = None if body is None else agent_request.read(body, Registration)[0]
    if data is None or data["node"] != credential.name:
        return messages
    address = agent_asgi.peer_address(scope)
    try:
        answer = await agent_asgi.run(agent_asgi.register, credential.text, data, address)
    except (OperationalError, InterfaceError):
        await _outage(scope, send)
        return None
    if answer is None:
        return messages
    await _answer(scope, send, 200, _encode(answer), [])
    return None
