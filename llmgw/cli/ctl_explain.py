"""`llmgw ctl explain MODEL` without --all: each refusal's reason once per
profile tried, with how many nodes it refused, the first few named, and
one node's own words for the number that bit. At 18 GB200 trays refused
for one reason, a line per tray was eighteen lines saying one thing.

Grouped by the reason code the explanation carries (the server already
lists each profile's refusals under their code), never by the words."""

from __future__ import annotations

from typing import Any


def nodes(count: int) -> str:
    return f"{count} node" + ("" if count == 1 else "s")


def names(reason: dict[str, Any]) -> str:
    shown = [n["node"] for n in reason["nodes"]]
    hidden = reason["count"] - len(shown)
    return ", ".join(shown) + (f" and {hidden} more" if hidden > 0 else "")


def attempt_header(attempt: dict[str, Any]) -> str:
    verdict = "placed" if attempt["placed"] else "does not fit"
    return f"profile {attempt['profile']} (priority {attempt['priority']}): {verdict}"


def reason_lines(reason: dict[str, Any]) -> list[str]:
    out = [f"  {nodes(reason['count'])}: {reason['summary']} ({reason['code']}): {names(reason)}"]
    if reason["nodes"]:
        out.append(f"    e.g. {reason['nodes'][0]['message']}")
    return out


def grouped(data: dict[str, Any]) -> list[str]:
    """The server's lines up to the first profile tried (when it was made,
    where the replica went), then each profile's reasons grouped."""
    attempts = data.get("attempts") or []
    lines: list[str] = data["lines"]
    if not attempts:
        return lines
    first = attempt_header(attempts[0])
    if first not in lines:  # a server that words its lines otherwise: print them
        return lines
    out = lines[: lines.index(first)]
    hidden = False
    for attempt in attempts:
        out.append(attempt_header(attempt))
        for reason in attempt["reasons"]:
            out += reason_lines(reason)
            hidden = hidden or reason["count"] > len(reason["nodes"])
    if hidden:
        out.append(f"every node on a line of its own: llmgw ctl explain {data['model']} --all")
    return out
