"""Cabling problems of a fat tree, found in what one discovery saw.

Two kinds, each naming the switches and ports:

* ``leaf-to-leaf``: a cable between two leaves. A fat tree has none; the
  traffic it carries skips the spines, and the ports it takes were meant
  for adapters or uplinks.
* ``port-down``: an uplink that is not there. ``ibnetdiscover`` lists only
  ports whose link is up, so a down port shows as a cable missing from a
  pattern every other switch of its tier follows: a leaf with no cable (or
  fewer cables) to a spine that more than half of the leaves it shares
  spines with reach, and likewise a spine to a core. The ports are the ones
  the other switches use for that peer, when free on this one, and the
  peer's one unused port in the range it cables, when that is one.

A spine that reaches half of those leaves or fewer belongs to a part of the
fabric (a pod), not to all of it, and is not judged. Linear in links plus
switches times their upper tier's peers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .ibnetdiscover import Fabric, Node

# (lower switch GUID, upper switch GUID) -> [(lower port, upper port), ...]
_Pairs = dict[tuple[str, str], list[tuple[int, int]]]


def problems(fabric: Fabric, tier: dict[str, str]) -> list[dict[str, Any]]:
    """Leaf-to-leaf cables and down uplinks, in that order."""
    nodes = fabric.nodes
    found: list[dict[str, Any]] = []
    below: dict[str, _Pairs] = {"leaf": {}, "spine": {}}
    upper = {"leaf": "spine", "spine": "core"}
    for link in fabric.links:
        a, b = link.a, link.b
        ta = tier.get(a.guid)
        if ta is None:
            continue
        tb = tier.get(b.guid)
        if tb is None:
            continue
        if ta == tb == "leaf" and a.guid != b.guid:
            lo, hi = sorted((a, b), key=lambda e: (nodes[e.guid].description, e.guid))
            found.append(_problem("leaf-to-leaf", nodes, lo.guid, lo.port, hi.guid, hi.port))
        elif upper.get(ta) == tb:
            below[ta].setdefault((a.guid, b.guid), []).append((a.port, b.port))
        elif upper.get(tb) == ta:
            below[tb].setdefault((b.guid, a.guid), []).append((b.port, a.port))
    used: set[tuple[str, int]] = set()
    for pairs in below.values():
        found += _missing(fabric, pairs, used)
    return found


def _used_ports(fabric: Fabric, used: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """Every cabled (GUID, port); built only once a cable is found missing."""
    if not used:
        for link in fabric.links:
            used.add((link.a.guid, link.a.port))
            used.add((link.b.guid, link.b.port))
    return used


def _problem(
    code: str, nodes: dict[str, Node], ga: str, pa: int | None, gb: str, pb: int | None
) -> dict[str, Any]:
    da, db = nodes[ga].description or ga, nodes[gb].description or gb
    if code == "leaf-to-leaf":
        message = f"{da} port {pa} is cabled to another leaf, {db} port {pb}"
    else:
        message = (
            f"{da} port {pa if pa is not None else '?'} to {db} "
            f"port {pb if pb is not None else '?'} is down: the other switches of "
            f"its tier have that cable"
        )
    return {
        "code": code,
        "message": message,
        "a": {"guid": ga, "description": nodes[ga].description, "port": pa},
        "b": {"guid": gb, "description": nodes[gb].description, "port": pb},
    }


def _groups(pairs: _Pairs) -> dict[str, int]:
    """Lower switch -> its group: switches cabled to the same uppers, joined
    through them (union-find over the pairs)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for lo, hi in pairs:
        ra, rb = find(lo), find(hi)
        if ra != rb:
            parent[ra] = rb
    roots: dict[str, int] = {}
    return {lo: roots.setdefault(find(lo), len(roots)) for lo, _ in pairs}


def _missing(fabric: Fabric, pairs: _Pairs, used: set[tuple[str, int]]) -> list[dict[str, Any]]:
    nodes = fabric.nodes
    group = _groups(pairs)
    members: dict[int, list[str]] = {}
    for lo in sorted(group):
        members.setdefault(group[lo], []).append(lo)
    reached: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for (lo, hi), ports in pairs.items():
        reached.setdefault(hi, {})[lo] = ports
    found: list[dict[str, Any]] = []
    for hi in sorted(reached):
        cabled = reached[hi]
        lows = members[group[next(iter(cabled))]]
        if len(cabled) * 2 <= len(lows):
            continue  # a spine of part of the group: not judged
        # the lower-end ports most switches use for this peer
        shapes = Counter(tuple(sorted(p for p, _ in ports)) for ports in cabled.values())
        expect = max(shapes.items(), key=lambda kv: (kv[1], len(kv[0])))[0]
        short = [lo for lo in lows if len(cabled.get(lo, ())) < len(expect)]
        if not short:
            continue
        used = _used_ports(fabric, used)
        hi_ports = sorted(p for ports in cabled.values() for _, p in ports)
        gaps = [p for p in range(hi_ports[0], hi_ports[-1] + 1) if (hi, p) not in used]
        for lo in short:
            have = {p for p, _ in cabled.get(lo, ())}
            free = [p for p in expect if p not in have and (lo, p) not in used]
            for k in range(len(expect) - len(have)):
                pa = free[k] if k < len(free) else None
                pb = gaps[0] if len(gaps) == 1 and len(short) == 1 else None
                found.append(_problem("port-down", nodes, lo, pa, hi, pb))
    return found
