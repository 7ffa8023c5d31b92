"""The heartbeat's fast path: the body decoded straight into the protocol's
Heartbeat struct, parsed and checked in one pass with nothing built per
request.

It only ever answers "valid, and here is the data" or "not sure". Every
"not sure" goes to HeartbeatView, which reads the body with the strict
reader first (llmgw.validation.loads refuses NUL, lone surrogates,
non-finite numbers and deep nesting anywhere, unknown fields too, naming
them) and then names every bad field against the same structs. msgspec
refuses the surrogates and non-finite numbers it decodes, a NUL is handed
over below, and a body too deep for msgspec is handed over too.
"""

from __future__ import annotations

from typing import Any

import msgspec
from llmgw_agent.protocol.messages import Heartbeat

_decoder = msgspec.json.Decoder(Heartbeat)


def decode_heartbeat(body: bytes) -> dict[str, Any] | None:
    """The heartbeat as plain data, as the services take it; None when the
    checked path must decide."""
    # JSON can only spell a NUL as an escape. A false alarm (an escaped
    # backslash before "u0000") costs only the slower path.
    if b"\\u0000" in body:
        return None
    try:
        data: dict[str, Any] = msgspec.to_builtins(_decoder.decode(body))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return data


def json_schema(kind: Any) -> dict[str, Any]:
    """The OpenAPI 3.0 schema of a protocol struct's body, from msgspec's
    JSON schema, so the API's schema needs no hand-written serializer: its
    definitions written in place (they hold no cycle), and null spelt as
    OpenAPI 3.0 does ("nullable"; it has no "null" type)."""
    schema = msgspec.json.schema(kind)
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(value) for value in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return inline(defs[node["$ref"].rsplit("/", 1)[1]])
        node = {key: inline(value) for key, value in node.items()}
        # Not in OpenAPI 3.0: a map's keys are checked all the same.
        node.pop("propertyNames", None)
        if node.get("required") == []:
            del node["required"]  # OpenAPI 3.0 wants at least one, or none listed
        if "const" in node:
            node["enum"] = [node.pop("const")]
        options = node.get("anyOf")
        if options and {"type": "null"} in options:
            rest = [option for option in options if option != {"type": "null"}]
            node = {k: v for k, v in node.items() if k != "anyOf"}
            node.update(rest[0] if len(rest) == 1 else {"anyOf": rest})
            node["nullable"] = True
        return node

    return inline(schema)
