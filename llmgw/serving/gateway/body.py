"""A proxied request's body: read whole, checked as clean text, and only
its "model" and "stream" decoded (msgspec, skipping the rest). The body is
forwarded to the engine as it came."""

from __future__ import annotations

import msgspec

from llmgw.serving.gateway.asgi import Receive, Send
from llmgw.serving.gateway.errors import send_error
from llmgw.validation import problems

MAX_BODY_BYTES = 32 * 1024 * 1024


class Head(msgspec.Struct):
    model: str | None = None
    stream: bool | None = None


_decode_head = msgspec.json.Decoder(Head).decode
_decode_any = msgspec.json.Decoder().decode


class _TooLarge(Exception):
    pass


async def read_request(receive: Receive, send: Send) -> tuple[bytes, Head, str] | None:
    """The body, its head and its model; None when the client left before
    sending it all, or was answered with what is wrong with it."""
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
        return None
    if body is None:
        return None
    refused = _unclean(body)
    if refused is not None:
        await send_error(send, 400, *refused)
        return None
    try:
        head = _decode_head(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        # msgspec recurses once per level, skipped fields too.
        said = "nested too deeply" if isinstance(exc, RecursionError) else exc
        await send_error(
            send, 400, f"Invalid request body: {said}", "invalid_request_error", "invalid_json"
        )
        return None
    if not head.model:
        await send_error(
            send,
            400,
            "You must provide a model parameter.",
            "invalid_request_error",
            None,
            "model",
        )
        return None
    return body, head, head.model


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
    body: bytes = message.get("body", b"")
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
