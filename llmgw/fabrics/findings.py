"""What a fabric map found, one line each, naming its switch, port and node.

Stored beside the map's summary (sweep.store_map) so `llmgw ctl fabrics`
and the fabric list can say what is wrong without loading the whole map (a
big fabric's is megabytes). Capped: a fabric with a thousand short cables
needs the first few named and the count, not a thousand lines.
"""

from __future__ import annotations

from typing import Any

# Named lines kept per kind of finding; the rest are counted.
PER_KIND = 20


def _end(end: dict[str, Any]) -> str:
    port = end["port"] if end.get("port") is not None else "?"
    return f"{end.get('description') or end['guid']} port {port}"


def _rate(rate: Any, text: Any) -> str:
    return f"{text} ({rate} Gb/s)" if text else f"{rate} Gb/s"


def _degraded(d: dict[str, Any]) -> str:
    return (
        f"degraded link: {_end(d['a'])} - {_end(d['b'])} at {_rate(d['rate'], d['rate_text'])}, "
        f"where its {d['kind']} links run at "
        f"{_rate(d['expected_rate'], d['expected_rate_text'])}"
    )


def _misaligned(m: dict[str, Any], leaves: dict[str, str]) -> str:
    leaf = leaves.get(m["leaf_guid"], m["leaf_guid"])
    port = m.get("leaf_port")
    # Maps analysed before hosts were told by system image GUID have no "host".
    host = m.get("host") or m.get("node") or m["adapter_guid"]
    line = (
        f"off its rail: {host} {m['device']} on {leaf}"
        + (f" port {port}" if port is not None else "")
        + f", a {m['leaf_carries']} leaf"
    )
    if m.get("host_note"):
        line += f" ({m['host_note']})"
    if m.get("management"):
        line += f" ({m['management']}: not a rail member)"
    return line


def _problem(p: dict[str, Any]) -> str:
    return f"{p['code']}: {_end(p['a'])} - {_end(p['b'])}"


def findings(analysis: dict[str, Any]) -> dict[str, Any]:
    """``{"lines": [{"kind", "message"}], "left_out": {kind: count}}``."""
    leaves = {sw["guid"]: sw.get("description") or sw["guid"] for sw in analysis["switches"]}
    kinds: list[tuple[str, list[str]]] = [
        ("degraded_link", [_degraded(d) for d in analysis.get("degraded_links") or []]),
        (
            "misaligned_rail",
            [_misaligned(m, leaves) for m in analysis.get("rail_misalignment") or []],
        ),
        # Maps analysed before cabling problems were looked for have no such key.
        ("problem", [_problem(p) for p in analysis.get("problems") or []]),
    ]
    lines: list[dict[str, str]] = []
    left_out: dict[str, int] = {}
    for kind, found in kinds:
        lines += [{"kind": kind, "message": m} for m in found[:PER_KIND]]
        if len(found) > PER_KIND:
            left_out[kind] = len(found) - PER_KIND
    return {"lines": lines, "left_out": left_out}
