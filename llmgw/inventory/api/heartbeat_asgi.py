"""POST /api/agent/v1/heartbeat before Django, as the gateway's /v1/ is.

Django's middleware, URL resolution and request objects cost more per
heartbeat than decoding and storing it, and at 1,000 heartbeats a second
on two cores that is the budget gone. A valid heartbeat with its own
node's credential is read here straight from ASGI, decoded by msgspec
into the protocol's Heartbeat (agent_fast), and handed to the process's
Coalescer, which stores it in one statement with the others of its tick
and answers once that has committed.

It only ever answers "stored, and here is your answer". Everything else
(another method, a client certificate, no or a malformed credential, a body over the limit or
not a valid heartbeat, another node's name, a credential the statement did
not authenticate) is handed to Django, body and all, before anything is
written, where HeartbeatView answers exactly as it always has: 401, 413,
400 naming every bad field, 403 with its audit record. Joins and
registrations take the same way, served by agent_asgi.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone
from llmgw_agent.protocol.messages import Join, Registration

from llmgw.accounts import hashing
from llmgw.inventory import credentials
from llmgw.inventory.api import agent_asgi
from llmgw.inventory.api.agent_fast import decode_heartbeat
from llmgw.inventory.coalesce import Coalescer

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PATH = "/api/agent/v1/heartbeat"
RETRY_AFTER_S = 5
_encode = msgspec.json.Encoder().encode


def _headers(body: bytes, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """What Django's answer to the same request carries (HeartbeatView's
    DRF Response and the security middleware's headers), so the two
    paths cannot be told apart."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"vary", b"Accept"),
        (b"allow", b"POST, OPTIONS"),
        *extra,
    ]
    if settings.X_FRAME_OPTIONS:
        headers.append((b"x-frame-options", settings.X_FRAME_OPTIONS.encode()))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        headers.append((b"referrer-policy", str(settings.SECURE_REFERRER_POLICY).encode()))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        policy = settings.SECURE_CROSS_ORIGIN_OPENER_POLICY
        headers.append((b"cross-origin-opener-policy", policy.encode()))
    return headers


async def _answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _headers(body, extra)})
    await send({"type": "http.response.body", "body": body})


async def _read(receive: Receive, limit: int) -> tuple[list[Message], bool]:
    """The body's messages, up to a little over `limit`; whether all came."""
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, False
        size += len(message.get("body", b""))
        if size > limit:
            return messages, False
        if not message.get("more_body"):
            return messages, True


async def _outage(send: Send) -> None:
    # As llmgw.outage answers for Django: the agents fail over on a 503.
    body = _encode(
        {
            "detail": "the control plane's database cannot be reached; retry shortly",
            "retry_after_s": RETRY_AFTER_S,
        }
    )
    await _answer(send, 503, body, [(b"retry-after", str(RETRY_AFTER_S).encode())])


def heartbeats_first(app: ASGIApp, coalescer: Coalescer | None = None) -> ASGIApp:
    """`app` for everything but a heartbeat this path can store itself, and
    a join or registration it can serve itself (agent_asgi)."""
    writer = coalescer or Coalescer()
    lean = {
        PATH: partial(_lean, coalescer=writer),
        agent_asgi.JOIN: _lean_join,
        agent_asgi.REGISTER: _lean_register,
    }

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        serve = lean.get(scope["path"]) if scope["type"] == "http" else None
        if serve is None or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        messages = await serve(scope, receive, send)
        if messages is None:
            return

        async def replay() -> Message:
            # What was read here, then the connection's own messages.
            return messages.pop(0) if messages else await receive()

        await app(scope, replay, send)

    route.coalescer = writer  # type: ignore[attr-defined]
    return route


async def _lean(
    scope: Scope, receive: Receive, send: Send, coalescer: Coalescer
) -> list[Message] | None:
    """None once answered; else the messages read, for Django to read again."""
    tls = (scope.get("extensions") or {}).get("tls") or {}
    if tls.get("client_cert_chain"):
        # A connection that came with a client certificate is that
        # certificate's node, which Django's authentication decides.
        return []
    headers = dict(scope.get("headers") or [])
    scheme, _, credential = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    parts = credentials.split_credential(credential) if scheme == "Node" else None
    limit = settings.AGENT_MAX_PAYLOAD_BYTES
    declared = headers.get(b"content-length", b"0")
    if parts is None or not declared.isdigit() or int(declared) > limit:
        return []
    messages, whole = await _read(receive, limit)
    if not whole:
        return messages
    body = b"".join(message.get("body", b"") for message in messages)
    data = decode_heartbeat(body)
    if data is None or data["node"] != parts[0]:
        return messages
    try:
        answer = await coalescer.submit(parts[0], hashing.digest(parts[1]), data, timezone.now())
    except (OperationalError, InterfaceError):
        await _outage(send)
        return None
    if answer is None:
        return messages
    await _answer(send, 200, _encode(answer), [])
    return None


async def _body(scope: Scope, receive: Receive) -> tuple[list[Message], bytes | None]:
    """The messages read, and the whole body when it is within the agent limit."""
    limit = settings.AGENT_MAX_PAYLOAD_BYTES
    declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
    if not declared.isdigit() or int(declared) > limit:
        return [], None
    messages, whole = await _read(receive, limit)
    if not whole:
        return messages, None
    return messages, b"".join(message.get("body", b"") for message in messages)


async def _lean_join(scope: Scope, receive: Receive, send: Send) -> list[Message] | None:
    """None once answered; else the messages read, for Django to read again."""
    messages, body = await _body(scope, receive)
    data = None if body is None else agent_asgi.parse(body, Join)
    if data is None:
        return messages
    try:
        status, answer = await agent_asgi.run(agent_asgi.join, data)
    except (OperationalError, InterfaceError):
        await _outage(send)
        return None
    await _answer(send, status, _encode(answer), [])
    return None


async def _lean_register(scope: Scope, receive: Receive, send: Send) -> list[Message] | None:
    """None once answered; else the messages read, for Django to read again."""
    credential = agent_asgi.credential_of(scope)
    if credential is None:
        return []
    messages, body = await _body(scope, receive)
    data = None if body is None else agent_asgi.parse(body, Registration)
    if data is None or data["node"] != credential[1][0]:
        return messages
    address = agent_asgi.peer_address(scope)
    try:
        answer = await agent_asgi.run(agent_asgi.register, credential[0], data, address)
    except (OperationalError, InterfaceError):
        await _outage(send)
        return None
    if answer is None:
        return messages
    await _answer(send, 200, _encode(answer), [])
    return None
