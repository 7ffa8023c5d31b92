"""The lines every surface prints for a placement's explanation.

Rendered here, once: the API returns the lines beside the structured data,
and the command line and the console print them as they are (three
renderings, server, command line and page, had drifted apart in their
words). Rendered from the data, not from the scheduler's objects, so a
stored explanation reads the same as a fresh one.
"""

from __future__ import annotations

from typing import Any

from llmgw.units import format_bytes

DASH = "-"
# Nodes a grouped explanation names for a reason; each reason says how many in all.
NAMED = 3


def lines(data: dict[str, Any]) -> list[str]:
    """Where the replica went (or that it could not go anywhere), then every
    profile tried and each node it refused, with the number that bit."""
    return decision_lines(data) + attempt_lines(data)


def decision_lines(data: dict[str, Any]) -> list[str]:
    decision = data.get("decision")
    if not decision:
        return [f"{data['model']}: cannot be placed"]
    where = f" across {decision['fabric']}" if decision.get("fabric") else ""
    out = [f"{data['model']}: placed as profile {decision['profile']}{where}"]
    if data.get("route"):
        out.append(f"  {data['route']}")
    for s in decision["shards"]:
        gpus = ",".join(str(g) for g in s["gpus"]) or DASH
        extra = f" adapters {','.join(s['adapters'])}" if s["adapters"] else ""
        # Where it sits in the facility tree, when its labels say.
        at = f" ({s['location']})" if s.get("location") else ""
        out.append(
            f"  {s['node']}{at}: GPUs {gpus}, {s['cpu_cores']} cores, "
            f"{format_bytes(s['memory_bytes'])}{extra}"
        )
    return out


def attempt_lines(data: dict[str, Any]) -> list[str]:
    out = []
    for attempt in data.get("attempts", []):
        out.append(attempt_header(attempt))
        for reason in attempt["reasons"]:
            out.append(f"  {reason['summary']} ({nodes(reason['count'])}, {reason['code']}):")
            out.extend(f"    {n['message']}" for n in reason["nodes"])
            hidden = reason["count"] - len(reason["nodes"])
            if hidden > 0:
                out.append(f"    and {hidden} more (every node: ctl explain --all)")
    if not data.get("attempts"):
        out.append("no profiles to place")
    return out


def shortened(data: dict[str, Any], most: int) -> dict[str, Any]:
    """An explanation naming at most `most` nodes a reason, its lines
    rendered again (each reason keeps its count, so they say how many
    more). At 5,000 nodes the full list is a megabyte nobody reads whole."""
    heading = data["lines"][: len(data["lines"]) - len(lines(data))]
    short = {
        **data,
        "attempts": [
            {**a, "reasons": [{**r, "nodes": r["nodes"][:most]} for r in a["reasons"]]}
            for a in data.get("attempts", [])
        ],
    }
    # The text ends with the attempts; what comes before them is kept.
    text = data.get("text")
    if isinstance(text, str):
        full = "\n".join(attempt_lines(data))
        if text.endswith(full):
            short["text"] = text[: len(text) - len(full)] + "\n".join(attempt_lines(short))
    return {**short, "lines": heading + lines(short)}


def grouped(data: dict[str, Any]) -> dict[str, Any]:
    """The explanation with its reasons said once each: `heading`, the
    lines before the profiles tried (when it was made, what became of its
    replica, where it went), and `grouped`, the heading then each profile's
    reasons with how many nodes, the first few named and one node's own
    words. At 18 GB200 trays refused for one reason, a line per tray was
    eighteen lines saying one thing. `llmgw ctl explain` prints `grouped`
    and the console draws the same reasons (`attempts[].reasons`, grouped
    by their code, never by their words); `lines` keeps every node."""
    rendered, every = data["lines"], attempt_lines(data)
    if rendered[len(rendered) - len(every) :] != every:
        # Lines that end otherwise (a placement's own answer): as they are.
        return {**data, "heading": rendered, "grouped": rendered}
    heading = rendered[: len(rendered) - len(every)]
    out = list(heading)
    hidden = False
    for attempt in data.get("attempts", []):
        out.append(attempt_header(attempt))
        for reason in attempt["reasons"]:
            out += reason_lines(reason)
            hidden = hidden or reason["count"] > NAMED
    if not data.get("attempts"):
        out.append("no profiles to place")
    if hidden:
        out.append(f"every node on a line of its own: llmgw ctl explain {data['model']} --all")
    return {**data, "heading": heading, "grouped": out}


def attempt_header(attempt: dict[str, Any]) -> str:
    verdict = "placed" if attempt["placed"] else "does not fit"
    return f"profile {attempt['profile']} (priority {attempt['priority']}): {verdict}"


def reason_lines(reason: dict[str, Any]) -> list[str]:
    shown = [n["node"] for n in reason["nodes"][:NAMED]]
    hidden = reason["count"] - len(shown)
    names = ", ".join(shown) + (f" and {hidden} more" if hidden > 0 else "")
    out = [f"  {nodes(reason['count'])}: {reason['summary']} ({reason['code']}): {names}"]
    if reason["nodes"]:
        out.append(f"    e.g. {reason['nodes'][0]['message']}")
    return out


def nodes(count: int) -> str:
    return f"{count} node" + ("" if count == 1 else "s")
