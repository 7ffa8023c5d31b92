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
        out.append(
            f"  {s['node']}: GPUs {gpus}, {s['cpu_cores']} cores, "
            f"{format_bytes(s['memory_bytes'])}{extra}"
        )
    return out


def attempt_lines(data: dict[str, Any]) -> list[str]:
    out = []
    for attempt in data.get("attempts", []):
        verdict = "placed" if attempt["placed"] else "does not fit"
        out.append(f"profile {attempt['profile']} (priority {attempt['priority']}): {verdict}")
        for reason in attempt["reasons"]:
            count = f"{reason['count']} node" + ("" if reason["count"] == 1 else "s")
            out.append(f"  {reason['summary']} ({count}, {reason['code']}):")
            out.extend(f"    {n['message']}" for n in reason["nodes"])
    if not data.get("attempts"):
        out.append("no profiles to place")
    return out
