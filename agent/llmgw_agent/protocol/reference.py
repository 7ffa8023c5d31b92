"""The field reference of docs/agent-protocol.md, written from the structs.

`python -m llmgw_agent.protocol.reference docs/agent-protocol.md` rewrites
the part of the document between the two markers; a test checks that the
document holds what this writes, so the prose and the structs cannot drift.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from .bounds import BLANK_OR_TEXT, NAME, TEXT, XID_CODE
from .certificates import CertificateRequest, IssuedCertificate
from .messages import Answer, Heartbeat, Join, Joined, Registration
from .stream import Command, Result

BEGIN = "<!-- fields: written by python -m llmgw_agent.protocol.reference -->"
END = "<!-- end of fields -->"
MESSAGES = (
    Join, Joined, Registration, Heartbeat, Answer, Command, Result, CertificateRequest,
    IssuedCertificate,
)  # fmt: skip
# JSON schema keywords, as the table says them.
_BOUNDS = (
    ("minimum", "≥ {}"),
    ("maximum", "≤ {}"),
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("minItems", "at least {} items"),
    ("maxItems", "at most {} items"),
)

_PATTERNS = {
    TEXT: "text (no surrounding whitespace, not blank)",
    BLANK_OR_TEXT: "text (no surrounding whitespace)",
    XID_CODE: "decimal digits (at most 10)",
    NAME: "a name (a letter or digit, then letters, digits, `.`, `_`, `-`; at most 253)",
}


def _kind(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return "`" + str(schema["$ref"]).rsplit("/", 1)[1] + "`"
    if "anyOf" in schema:
        return " or ".join(_kind(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v!r}`".replace("'", '"') for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_kind(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map to {_kind(schema['additionalProperties'])}"
    return str(kind)


def _bounds(schema: dict[str, Any]) -> list[str]:
    found = [text.format(schema[key]) for key, text in _BOUNDS if key in schema]
    if "pattern" in schema:
        found.append(_PATTERNS.get(schema["pattern"], f"pattern `{schema['pattern']}`"))
    for inner in schema.get("anyOf", []):
        found += _bounds(inner)
    if schema.get("type") == "array":
        found += [f"each {b}" for b in _bounds(schema.get("items", {}))]
    return found


def render() -> str:
    _, components = msgspec.json.schema_components(MESSAGES)
    lines = [BEGIN, ""]
    for name, schema in sorted(components.items()):
        required = set(schema.get("required", []))
        lines += [f"#### `{name}`", "", "| field | type | required | bounds |", "|---|---|---|---|"]
        for field, spec in schema.get("properties", {}).items():
            bounds = "; ".join(_bounds(spec)) or "-"
            yes = "yes" if field in required else "no"
            lines.append(f"| `{field}` | {_kind(spec)} | {yes} | {bounds} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def section(document: str) -> str:
    """The generated part of `document` (markers included)."""
    start, end = document.index(BEGIN), document.index(END) + len(END)
    return document[start:end]


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    document = path.read_text(encoding="utf-8")
    path.write_text(document.replace(section(document), render()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
