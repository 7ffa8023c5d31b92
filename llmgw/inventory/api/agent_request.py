"""What an agent's request says: its credential, whether its body is within
the limit, and the body read as a protocol message. One reader for every
way an agent comes in: the paths before Django (heartbeat_asgi), DRF's
views (agent_views, auth) and the command stream (consumers), so a rule
changed here changes for all of them at once.

A body is decoded once per request. The lean path decodes it straight
into the protocol's struct (msgspec, nothing built per request); only
what that refuses is read again, after the credential was checked, by the
strict reader (llmgw.validation.loads) that names every bad field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from django.conf import settings
from llmgw_agent.protocol.errors import field_errors
from llmgw_agent.protocol.messages import Heartbeat

from llmgw.inventory import credentials
from llmgw.validation import Refused, loads

SCHEME = "Node"
# The scope key the lean path leaves for Django when the statement that
# was to store a heartbeat authenticated nobody: the credential it carried,
# refused, so Django answers 401 without asking the database again.
REFUSED = "llmgw.agent.refused"

# Names the code that answered an agent's request: "lean" (before Django,
# heartbeat_asgi) or "django" (DRF's views), so a test and an operator can
# see which way a request took.
SERVED_BY = "X-Llmgw-Served-By"

ASGIMessage = dict[str, Any]
Receive = Callable[[], Awaitable[ASGIMessage]]


@dataclass(frozen=True, slots=True)
class Credential:
    """`Authorization: Node <name>.<secret>`, as sent and split."""

    text: str
    name: str
    secret: str


def credential(header: bytes | str) -> Credential | None:
    """The node credential an Authorization header carries; None for any
    other scheme, or one that names no node."""
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, text = header.partition(" ")
    if scheme != SCHEME:
        return None
    parts = credentials.split_credential(text)
    return None if parts is None else Credential(text, *parts)


def header(scope: dict[str, Any], name: bytes) -> bytes:
    """One request header of an ASGI scope (lower-case name); b"" if absent."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value)
    return b""


def has_certificate(scope: dict[str, Any] | None) -> bool:
    """Whether the connection came with a client certificate: then it is
    that certificate's node, which Django's authentication decides."""
    tls = ((scope or {}).get("extensions") or {}).get("tls") or {}
    return bool(tls.get("client_cert_chain"))


def scope_credential(scope: dict[str, Any]) -> Credential | None:
    """The node credential of a request that came without a client
    certificate; None for anything else."""
    if has_certificate(scope):
        return None
    return credential(header(scope, b"authorization"))


def over_limit(size: int) -> str | None:
    """Why a body of `size` bytes is refused (413), or None."""
    limit = settings.AGENT_MAX_PAYLOAD_BYTES
    return f"{size} bytes is over the limit of {limit}" if size > limit else None


def declared_within_limit(scope: dict[str, Any]) -> bool:
    """Whether the request says how long its body is, within the limit:
    reading an oversized one is Django's to refuse, after the credential."""
    declared = header(scope, b"content-length") or b"0"
    return declared.isdigit() and over_limit(int(declared)) is None


async def read_body(receive: Receive) -> tuple[list[ASGIMessage], bytes | None]:
    """The messages read, and the whole body when it came within the limit
    (else None: the messages go to Django to read again)."""
    limit = settings.AGENT_MAX_PAYLOAD_BYTES
    messages: list[ASGIMessage] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > limit:
            return messages, None
        if not message.get("more_body"):
            return messages, b"".join(m.get("body", b"") for m in messages)


# Kinds whose struct decoder is proven to take exactly what the strict
# reader takes (tests/inventory/test_agent_fast.py); the others are read
# by the strict reader alone, as their fields hold free-form JSON.
_decoders: dict[type[msgspec.Struct], msgspec.json.Decoder[Any]] = {
    Heartbeat: msgspec.json.Decoder(Heartbeat)
}


def decode(body: bytes, kind: type[msgspec.Struct]) -> dict[str, Any] | None:
    """The body as `kind`, as plain data, when the struct's decoder alone
    takes it; None when the strict reader must decide (read())."""
    decoder = _decoders.get(kind)
    # JSON can only spell a NUL as an escape. A false alarm (an escaped
    # backslash before "u0000") costs only the strict reader.
    if decoder is None or b"\\u0000" in body:
        return None
    try:
        return _plain(decoder.decode(body))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def read(
    body: bytes, kind: type[msgspec.Struct]
) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """The body as `kind` and no errors, or None and every bad field by
    path: decode() first, then the strict reader (llmgw.validation.loads
    refuses NUL, lone surrogates, non-finite numbers and deep nesting
    anywhere, unknown fields too) and the protocol's struct."""
    data = decode(body, kind)
    if data is not None:
        return data, {}
    try:
        raw = loads(body)
    except Refused as refused:
        return None, refused.errors
    if not isinstance(raw, dict):
        return None, {"payload": ["expected a JSON object"]}
    try:
        return _plain(msgspec.convert(raw, kind)), {}
    except msgspec.ValidationError:
        errors: dict[str, list[str]] = field_errors(raw, kind)
        return None, errors


def _plain(message: Any) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(message)
    return data
