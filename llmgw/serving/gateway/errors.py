"""OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import msgspec

from llmgw.serving.gateway.asgi import Send

_encode = msgspec.json.Encoder().encode


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    return _encode({"error": {"message": message, "type": type_, "param": param, "code": code}})


def sse_error_event(message: str, code: str) -> bytes:
    """The event that ends a stream that broke after its first byte: the
    status line is gone, so the error travels in the stream itself, the way
    OpenAI's own API reports a failure mid-stream."""
    return b"data: " + error_body(message, "server_error", code) + b"\n\n"


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send: Send,
    status: int,
    message: str,
    type_: str,
    code: str | None,
    param: str | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send_json(send, status, error_body(message, type_, code, param), headers)
