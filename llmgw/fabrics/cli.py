"""``llmgw fabric analyze FILE [--json]``: read an ibnetdiscover dump, say what it shows.

``analyze_main`` takes the arguments after ``analyze`` and returns an exit
status: 0 when the dump was read (whatever it found), 1 when it could not be
read or parsed, 2 for a usage error. FILE ``-`` reads standard input.
Until the ``llmgw`` command wires it in: ``python -m llmgw.fabrics.cli analyze FILE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from .ibnetdiscover import ParseError, parse
from .topology import analyze


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmgw fabric analyze",
        description="Map an InfiniBand fabric from `ibnetdiscover` (or `ibnetdiscover -p`) output: "
        "switch tiers, adapters, cables trained below their kind's rate, misaligned rails, "
        "leaf-to-leaf cables and down uplinks.",
    )
    p.add_argument("file", metavar="FILE", help="ibnetdiscover output, or - for stdin")
    p.add_argument("--json", action="store_true", help="print the whole map as JSON")
    return p


def _label(end: dict[str, Any]) -> str:
    return f"{end['description'] or end['guid']} [{end['port']}]"


def render(result: dict[str, Any]) -> str:
    """The human-readable summary of :func:`~llmgw.fabrics.topology.analyze`'s dict."""
    s = result["summary"]
    out: list[str] = []
    out.append(
        f"switches: {s['switches']} (leaf {s['leaf']}, spine {s['spine']}, core {s['core']}"
        + (f", {s['unknown_tier']} reaching no adapter" if s["unknown_tier"] else "")
        + ")"
    )
    out.append(
        f"adapters: {s['adapters']} ({s['host_adapters']} host, "
        f"{s['aggregation_nodes']} SHARP aggregation nodes"
        + (f", {s['routers']} routers" if s["routers"] else "")
        + ")"
    )
    hosts = [a for a in result["adapters"] if a["role"] == "adapter"]
    # Maps analysed before hosts were told by system image GUID have no "host".
    named = {a["node"] for a in hosts if a["node"]}
    unset = {a.get("host") for a in hosts if not a["node"] and a.get("host")}
    adapters_unset = sum(1 for a in hosts if not a["node"])
    out.append(
        f"nodes: {len(named)}"
        + (
            f"; {adapters_unset} adapters with no node description set, named by "
            f"system image GUID ({len(unset)} GUIDs)"
            if adapters_unset
            else ""
        )
    )
    out.append(f"links: {s['links']}")
    out += _rates(result)
    out.append(f"degraded links: {s['degraded_links']}")
    for d in result["degraded_links"]:
        out.append(
            f"  {_label(d['a'])} - {_label(d['b'])}: {d['rate_text']} ({d['rate']} Gb/s), "
            f"{d['kind']} links run at {d['expected_rate_text']} ({d['expected_rate']} Gb/s)"
        )
    if not s["rail_optimised"]:
        out.append(
            f"rails: not rail-optimised ({s['rail_aligned_share']:.0%} of adapters on a leaf "
            "of their own device); misalignment not judged"
        )
    else:
        managed = s.get("misaligned_management", 0)
        out.append(
            f"misaligned rails: {s['misaligned_rails']}"
            + (f" (and {managed} adapters of UFM or management hosts, no rail members)"
               if managed else "")
        )  # fmt: skip
        desc = {sw["guid"]: sw["description"] for sw in result["switches"]}
        for m in result["rail_misalignment"]:
            expected = ", ".join(desc.get(g, g) for g in m["expected_leaf_guids"]) or "none"
            host = m.get("host") or m["node"] or m["adapter_guid"]
            notes = [n for n in (m.get("host_note"), m.get("management")) if n]
            out.append(
                f"  {host} {m['device']}: on {desc.get(m['leaf_guid'], m['leaf_guid'])} "
                f"(a {m['leaf_carries']} leaf); expected {expected}"
                + "".join(f"; {n}" for n in notes)
            )
    for w in result["warnings"]:
        out.append(f"warning: {w}")
    # Maps analysed before cabling problems were looked for have no such key.
    for p in result.get("problems", []):
        out.append(problem_line(p))
    return "\n".join(out)


# Links named under a rate that is not their kind's most common one.
NAMED_LINKS = 10


def _rates(result: dict[str, Any]) -> list[str]:
    """Each kind of link with every rate its links run at, and the links
    at a rate other than the kind's most common, each by name: a fabric
    whose tiers mix rates (an EDR leaf-spine link among HDR ones, by design
    or not) shows it. A degraded link is said again below, with its rate."""
    by_kind: dict[str, Counter[tuple[Any, Any]]] = {}
    links: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for link in result["links"]:
        if link["rate"] is None:
            continue
        key = (link["rate"], link["rate_text"])
        by_kind.setdefault(link["kind"], Counter())[key] += 1
        links.setdefault((link["kind"], key), []).append(link)
    out: list[str] = []
    for kind, counts in sorted(by_kind.items()):
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], -kv[0][0]))
        if len(ranked) == 1:
            (rate, text), _ = ranked[0]
            out.append(f"  {kind}: {text} ({rate} Gb/s)")
            continue
        out.append(
            f"  {kind}: "
            + ", ".join(f"{text} ({rate} Gb/s) on {n} links" for (rate, text), n in ranked)
        )
        for key, n in ranked[1:]:
            named = links[(kind, key)][:NAMED_LINKS]
            out += [f"    {key[1]}: {_label(k['a'])} - {_label(k['b'])}" for k in named]
            if n > len(named):
                out.append(f"    {key[1]}: and {n - len(named)} more")
    return out


def _end(end: dict[str, Any]) -> str:
    port = end["port"] if end["port"] is not None else "?"
    return f"{end['description'] or end['guid']} port {port}"


def problem_line(p: dict[str, Any]) -> str:
    """One cabling problem: its kind, then both switches and ports (``?``
    where a down port's number cannot be told), as the console words it."""
    return f"problem: {p['code']}: {_end(p['a'])} - {_end(p['b'])}"


def analyze_main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse exits on --help and on errors
        return int(e.code) if isinstance(e.code, int) else 2
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
    except OSError as e:
        print(f"llmgw fabric analyze: {e}", file=sys.stderr)
        return 1
    try:
        result = analyze(parse(text))
    except ParseError as e:
        print(f"llmgw fabric analyze: {args.file}:{e.line_no}: {e.reason}", file=sys.stderr)
        print(f"  {e.line.rstrip()}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "analyze":
        print("usage: python -m llmgw.fabrics.cli analyze FILE [--json]", file=sys.stderr)
        return 2
    return analyze_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
