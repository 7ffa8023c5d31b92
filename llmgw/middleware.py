"""Request bodies over the limit answer 413 with a JSON body, everywhere.

Django's own limit (DATA_UPLOAD_MAX_MEMORY_SIZE) answers an HTML 400 and
only bites when a view reads request.body; DRF's parsers read the stream
past it. Under ASGI a chunked body, which declares no length, is spooled to
disk whole before any Django middleware runs. So the limit is enforced
twice, at the two places a body can enter: `limit_body` around the ASGI app
(declared or chunked) and `BodyLimitMiddleware` in Django (declared, for
WSGI and the test client). Both answer alike.

Text the database cannot store in the path or the query is refused here
too (`CleanTextMiddleware`), once for every view.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from llmgw.validation import text_problem

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def too_large(path: str, size: int | None) -> bytes:
    """The 413's body: the agent protocol's {"errors": ...} on its API,
    DRF's {"detail": ...} everywhere else."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    said = f"{size} bytes is" if size is not None else "the request body is"
    message = f"{said} over the limit of {limit} bytes"
    if path.startswith("/api/agent/"):
        return json.dumps({"errors": {"payload": [message]}}).encode()
    return json.dumps({"detail": message}).encode()


def _declared(value: str | bytes | None) -> int | None:
    """The Content-Length, or None when absent; -1 when it is not a number
    (the server refuses that itself; it is not under any limit either)."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return int(text) if text.isascii() and text.isdigit() else -1


class BodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        declared = _declared(request.META.get("CONTENT_LENGTH") or None)
        if declared is not None and declared > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return HttpResponse(
                too_large(request.path, declared), status=413, content_type="application/json"
            )
        return self.get_response(request)


def limit_body(app: ASGIApp) -> ASGIApp:
    """`app` behind the body limit. A chunked body is read here, up to the
    limit, and handed on as it came; Django would read it whole anyway."""

    async def refuse(scope: Scope, send: Send, size: int | None) -> None:
        body = too_large(scope["path"], size)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    # The rest of the body is not read: the connection cannot be reused.
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        headers = dict(scope.get("headers") or [])
        declared = _declared(headers.get(b"content-length"))
        if declared is not None:
            if declared > limit:
                await refuse(scope, send, declared)
                return
            # The server holds the body to its declared length.
            await app(scope, receive, send)
            return
        messages, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if size > limit:
                await refuse(scope, send, None)
                return
            messages.append(message)
            if not message.get("more_body"):
                break

        async def replay() -> dict[str, Any]:
            # The body as it came, then the connection's own messages
            # (Django listens for the disconnect).
            return messages.pop(0) if messages else await receive()

        await app(scope, replay, send)

    return guarded


class CleanTextMiddleware:
    """A NUL or a lone surrogate in the path or the query string is a 400
    that names where, before any view runs: PostgreSQL refuses a NUL in a
    statement, and every lookup by name would otherwise answer 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = _unclean(request)
        if problem is None:
            return self.get_response(request)
        body: dict[str, Any]
        if request.path.startswith("/api/agent/"):
            body = {"errors": {problem[0]: [problem[1]]}}
        else:
            body = {"detail": f"{problem[0]}: {problem[1]}"}
        return HttpResponse(json.dumps(body).encode(), status=400, content_type="application/json")


def _unclean(request: HttpRequest) -> tuple[str, str] | None:
    if (problem := text_problem(request.path)) is not None:
        return "path", problem
    for key, values in request.GET.lists():
        for text in (key, *values):
            if (problem := text_problem(text)) is not None:
                return ascii(key)[1:-1], problem
    return None
