"""The OpenAPI schema of the agent API's bodies, made from the protocol's
structs: the struct is the one definition of a body and its rules,
whichever path serves it."""

from __future__ import annotations

from typing import Any

import msgspec


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

    inlined: dict[str, Any] = inline(schema)
    return inlined
