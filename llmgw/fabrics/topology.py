"""Work out what a discovered InfiniBand fabric is: tiers, owners, bad cables, rails.

Input is a :class:`~llmgw.fabrics.ibnetdiscover.Fabric`; output is a plain,
JSON-ready dict (see :func:`analyze`). Every step is linear in nodes + links.

* **Tiers.** A *leaf* is a switch with a host adapter on it; *spine* is one
  switch hop from the nearest leaf, *core* two or more (breadth-first from all
  leaves at once). SHARP aggregation nodes are ``Ca`` records too, and every
  Quantum switch has one, spines included: they are recognised (same
  ``sysimgguid`` as their switch, or their description) and do not make a
  switch a leaf. A switch no leaf reaches (only seen in partial dumps, e.g. a
  ports report's unconnected lines) has tier ``unknown`` and ``hops: None``.
* **Owners.** ``"host mlx5_3"`` is device ``mlx5_3`` of node ``host``. A
  vendor default (``"MT4129 ConnectX7   Mellanox Technologies"``: the node
  never set its description) has no node and no device; a single word is a
  node whose device is unknown, unless it is a device name (``"HCA-3"``). A
  placeholder host name (``localhost``: the description was set before the
  hostname) names no node: many hosts share it. Such an adapter's *host* is
  its system image GUID (a machine's adapters share one where it is set),
  flagged "node description not set".
* **Rail of a device.** ``mlx5_N`` is rail N and ``HCA-N`` rail N-1: DGX OS
  names the compute adapters HCA-1.. in rail order, 1-based, and on the real
  DGX H100 fabric every leaf carrying HCA-N from the DGXs carries
  ``mlx5_(N-1)`` from the other hosts. Taking the rail from the name rather
  than the leaf keeps a miscabled adapter visible as one.
* **Degraded links.** A cable is degraded when it runs below what it was
  built to run. ``ibnetdiscover`` prints only the *active* width and speed
  (also ``-f``'s ``s=``/``w=``, and ``-p``), never what the ports support, so
  what a cable was built for is read from its like: cables are grouped by
  kind (``adapter-leaf``, ``leaf-spine``, ...) *and by the generation of
  both ends*, and the rate most of a group run at is expected of it. A
  switch's generation is its model (``devid``) and the fastest rate any of
  its cables runs at (a port never trains above what it supports); an
  adapter's is its model. So in a fabric midway through a spine upgrade the
  old spines' cables are judged against the old rate and the new spines'
  against the new one, not against one rate for the whole tier.
* **Problems.** Leaf-to-leaf cables and down uplinks, each with its
  switches and ports (:mod:`llmgw.fabrics.miscabling`).
* **Rails.** In a rail-optimised fabric every node's rail N goes to the
  leaf (group) of rail N. A leaf belongs to the rail most of its adapters
  are on; an adapter on a leaf that belongs to another rail is misaligned. A
  fabric where fewer than :data:`RAIL_OPTIMISED_SHARE` of adapters sit on a
  leaf of their own device is not rail-optimised (e.g. one leaf per rack), and
  then nothing is reported as misaligned. A storage or management leaf is no
  rail: one named so, or one where most adapters belong to hosts with no
  adapter on another leaf (a rail leaf's hosts each spread over the rails).
  Its adapters are left out of the rail checks, as is a named host with one
  adapter (it has no rails to keep apart). An adapter off its rail whose
  host is a UFM or management host (named so, or with fewer adapters than
  the compute hosts and none on its rail's leaf) is listed, flagged, and
  counted apart: it took a free leaf port and is no rail member.
* **Rates per link.** Each kind of link is printed with every rate its
  links run at, and the links at a minority rate by name, so a tier that
  mixes generations does not read as one rate.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from .ibnetdiscover import Fabric, Link, Node, Rate, gc_paused
from .miscabling import problems
from .rails import device_number, device_rail, rail_leaves, rails_of
from .rails import split_description as split_description

TIER_RANK = {
    "adapter": 0,
    "aggregation": 0,
    "router": 0,
    "leaf": 1,
    "spine": 2,
    "core": 3,
    "unknown": 4,
}


def _num(x: float | None) -> int | float | None:
    """400.0 -> 400 (JSON reads better); 2.5 stays 2.5."""
    if x is None:
        return None
    return int(x) if x == int(x) else x


def _is_aggregation(node: Node, switch_sysimg: set[str]) -> bool:
    if node.sysimgguid is not None and node.sysimgguid in switch_sysimg:
        return True
    return "aggregation node" in node.description.lower()


def analyze(fabric: Fabric) -> dict[str, Any]:
    """The fabric map as a dict of lists (see module docstring)."""
    with gc_paused():
        return _analyze(fabric)


def _analyze(fabric: Fabric) -> dict[str, Any]:
    nodes = fabric.nodes
    switches = [n for n in nodes.values() if n.kind == "switch"]
    role = _roles(nodes, switches)
    sw_adj, ports_of, leaves = _adjacency(fabric, role, switches)
    hops = _hops_from(leaves, sw_adj)
    tier = {n.guid: _tier(hops.get(n.guid)) for n in switches}
    rate_info = _rate_info(fabric.links)
    gen = _generations(fabric, rate_info)
    link_rows, groups, by_group, rate_text = _link_rows(fabric, tier, role, rate_info, gen)
    expected = _expected_rates(by_group)
    degraded = _degraded(link_rows, groups, expected, rate_text)
    by_kind: dict[str, Counter[int | float]] = {}
    for group, counts in by_group.items():
        by_kind.setdefault(group[0], Counter()).update(counts)
    kind_rate = _expected_rates(by_kind)
    adapters = _adapters(nodes, role, ports_of, rate_info)
    rails = rails_of(adapters, rail_leaves(adapters, nodes))
    switch_rows = _switch_rows(
        fabric, switches, tier, hops, adapters, rails["leaf_rail"], rails["leaf_rail_name"]
    )
    found = problems(fabric, tier)
    tiers = Counter(tier.values())
    roles = Counter(role.values())
    return {
        "format": fabric.format,
        "initiated_from": fabric.initiated_from,
        "summary": {
            "switches": len(switches),
            "leaf": tiers.get("leaf", 0),
            "spine": tiers.get("spine", 0),
            "core": tiers.get("core", 0),
            "unknown_tier": tiers.get("unknown", 0),
            "adapters": len(adapters),
            "host_adapters": roles.get("adapter", 0),
            "aggregation_nodes": roles.get("aggregation", 0),
            "routers": roles.get("router", 0),
            "links": len(link_rows),
            "degraded_links": len(degraded),
            "rail_optimised": rails["optimised"],
            "rail_aligned_share": rails["aligned_share"],
            # compute hosts' adapters off their rail; a UFM or management
            # host's are listed too, flagged, and counted apart
            "misaligned_rails": sum(1 for m in rails["misaligned"] if not m["management"]),
            "misaligned_management": sum(1 for m in rails["misaligned"] if m["management"]),
            "problems": len(found),
        },
        # the rate most cables of each kind run at: what the map shows per kind;
        # a cable is judged against its own generation's (see _generations)
        "expected_rates": {
            k: {"rate": v, "rate_text": _kind_rate_text(rate_text, k, v)}
            for k, v in sorted(kind_rate.items())
        },
        "switches": switch_rows,
        "adapters": adapters,
        "links": link_rows,
        "degraded_links": degraded,
        "rail_misalignment": rails["misaligned"],
        "warnings": list(fabric.warnings),
        # cabling that is wrong in itself: leaf-to-leaf cables, down uplinks
        "problems": found,
    }


# a link's rate as the map shows it: Gb/s and "4xNDR", both None when not reported
_RateInfo = dict[Rate | None, tuple[int | float | None, str | None]]
# an adapter's cabled port: its port, the peer's GUID and port, the link
_Port = tuple[int, str, int, Link]


def _roles(nodes: dict[str, Node], switches: list[Node]) -> dict[str, str]:
    """The role of every node that is not a switch: adapter, aggregation or router."""
    switch_sysimg = {n.sysimgguid or n.guid for n in switches} | {n.guid for n in switches}
    role: dict[str, str] = {}
    for n in nodes.values():
        if n.kind == "switch":
            continue
        if n.kind == "router":
            role[n.guid] = "router"
        elif _is_aggregation(n, switch_sysimg):
            role[n.guid] = "aggregation"
        else:
            role[n.guid] = "adapter"
    return role


def _adjacency(
    fabric: Fabric, role: dict[str, str], switches: list[Node]
) -> tuple[dict[str, list[str]], dict[str, list[_Port]], set[str]]:
    """In one pass over the links: each switch's switch neighbours, each other
    node's cabled ports, and the leaves (switches a host adapter is cabled to)."""
    nodes = fabric.nodes
    sw_adj: dict[str, list[str]] = {n.guid: [] for n in switches}
    ports_of: dict[str, list[_Port]] = {}
    leaves: set[str] = set()
    for link in fabric.links:
        a, b = link.a.guid, link.b.guid
        ka, kb = nodes[a].kind, nodes[b].kind
        if ka == "switch" and kb == "switch":
            if a != b:
                sw_adj[a].append(b)
                sw_adj[b].append(a)
            continue
        for mine, other in ((link.a, link.b), (link.b, link.a)):
            if nodes[mine.guid].kind != "switch":
                lst = ports_of.get(mine.guid)
                if lst is None:
                    lst = ports_of[mine.guid] = []
                lst.append((mine.port, other.guid, other.port, link))
                if role[mine.guid] == "adapter" and nodes[other.guid].kind == "switch":
                    leaves.add(other.guid)
    return sw_adj, ports_of, leaves


def _hops_from(leaves: set[str], sw_adj: dict[str, list[str]]) -> dict[str, int]:
    """Switch hops to the nearest leaf: multi-source BFS over switch-switch links."""
    hops: dict[str, int] = {g: 0 for g in leaves}
    queue = deque(leaves)
    while queue:
        g = queue.popleft()
        d = hops[g] + 1
        for h in sw_adj[g]:
            if h not in hops:
                hops[h] = d
                queue.append(h)
    return hops


def _tier(hops: int | None) -> str:
    if hops == 0:
        return "leaf"
    if hops == 1:
        return "spine"
    if hops is None:
        return "unknown"
    return "core"


def _rate_info(links: list[Link]) -> _RateInfo:
    info: _RateInfo = {None: (None, None)}
    for link in links:
        rate = link.rate
        if rate is not None and rate not in info:
            info[rate] = (_num(rate.gbps), rate.text)
    return info


# what a cable is judged against: its kind and both ends' generations
_Group = tuple[str, int, int]


def _generations(fabric: Fabric, rate_info: _RateInfo) -> dict[str, int]:
    """Each node's generation, numbered: a switch's is its model and the
    fastest rate any of its cables runs at (only a switch whose every cable
    trained short is misread: its cables then look like an older
    generation's); an adapter's, its model."""
    nodes = fabric.nodes
    fastest: dict[str, int | float] = {}
    for link in fabric.links:
        gbps = rate_info[link.rate][0]
        if gbps is None:
            continue
        for g in (link.a.guid, link.b.guid):
            if gbps > fastest.get(g, 0):
                fastest[g] = gbps
    ids: dict[tuple[Any, ...], int] = {}
    gen: dict[str, int] = {}
    for n in nodes.values():
        key = (n.devid, fastest.get(n.guid)) if n.kind == "switch" else (n.devid,)
        i = ids.get(key)
        if i is None:
            i = ids[key] = len(ids)
        gen[n.guid] = i
    return gen


def _link_rows(
    fabric: Fabric,
    tier: dict[str, str],
    role: dict[str, str],
    rate_info: _RateInfo,
    gen: dict[str, int],
) -> tuple[
    list[dict[str, Any]],
    list[_Group],
    dict[_Group, Counter[int | float]],
    dict[tuple[_Group, int | float], Counter[str]],
]:
    """Each link, lower tier first, with its kind ("leaf-spine") and group;
    and how many links of each group run at each rate, under which names."""
    nodes = fabric.nodes
    link_rows: list[dict[str, Any]] = []
    groups: list[_Group] = []
    by_group: dict[_Group, Counter[int | float]] = {}
    rate_text: dict[tuple[_Group, int | float], Counter[str]] = {}
    level = {g: TIER_RANK[t] for g, t in tier.items()}
    level.update((g, 0) for g in role)
    for link in fabric.links:
        ea, eb = link.a, link.b
        la, lb = level[ea.guid], level[eb.guid]
        if lb < la or (lb == la and eb.guid < ea.guid):
            ea, eb = eb, ea
        na, nb = nodes[ea.guid], nodes[eb.guid]
        ta = tier.get(ea.guid) or role[ea.guid]
        tb = tier.get(eb.guid) or role[eb.guid]
        kind = f"{ta}-{tb}"
        group = (kind, gen[ea.guid], gen[eb.guid])
        gbps, text = rate_info[link.rate]
        link_rows.append(
            {
                "a": _end(na, ea.port),
                "b": _end(nb, eb.port),
                "kind": kind,
                "rate": gbps,
                "rate_text": text,
            }
        )
        groups.append(group)
        if gbps is not None and text is not None:
            counts = by_group.get(group)
            if counts is None:
                counts = by_group[group] = Counter()
            counts[gbps] += 1
            texts = rate_text.get((group, gbps))
            if texts is None:
                texts = rate_text[(group, gbps)] = Counter()
            texts[text] += 1
    return link_rows, groups, by_group, rate_text


def _kind_rate_text(
    rate_text: dict[tuple[_Group, int | float], Counter[str]], kind: str, gbps: int | float
) -> str:
    names: Counter[str] = Counter()
    for (group, g), texts in rate_text.items():
        if group[0] == kind and g == gbps:
            names.update(texts)
    return names.most_common(1)[0][0]


def _end(node: Node, port: int) -> dict[str, Any]:
    return {
        "guid": node.guid,
        "port": port,
        "port_guid": node.port_guids.get(port, node.guid),
        "description": node.description,
    }


def _expected_rates(by_group: dict[Any, Counter[int | float]]) -> dict[Any, int | float]:
    expected: dict[Any, int | float] = {}
    for group, counts in by_group.items():
        # most common; a tie goes to the faster rate (the slower is the odd one out)
        expected[group] = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
    return expected


def _degraded(
    link_rows: list[dict[str, Any]],
    groups: list[_Group],
    expected: dict[_Group, int | float],
    rate_text: dict[tuple[_Group, int | float], Counter[str]],
) -> list[dict[str, Any]]:
    degraded: list[dict[str, Any]] = []
    for row, group in zip(link_rows, groups, strict=True):
        exp = expected.get(group)
        if row["rate"] is None or exp is None or row["rate"] >= exp:
            continue
        degraded.append(
            {
                "a": row["a"],
                "b": row["b"],
                "kind": row["kind"],
                "rate": row["rate"],
                "rate_text": row["rate_text"],
                "expected_rate": exp,
                "expected_rate_text": rate_text[(group, exp)].most_common(1)[0][0],
            }
        )
    return degraded


def _adapters(
    nodes: dict[str, Node],
    role: dict[str, str],
    ports_of: dict[str, list[_Port]],
    rate_info: _RateInfo,
) -> list[dict[str, Any]]:
    """Every node that is not a switch, with its owner, leaf and cabled ports."""
    adapters: list[dict[str, Any]] = []
    for n in nodes.values():
        if n.kind == "switch":
            continue
        node_name, device = split_description(n.description)
        rail = device_rail(device) if role[n.guid] == "adapter" else None
        # An adapter whose description names no host ("localhost mlx5_0",
        # the vendor's default) still sits in a machine: its adapters share
        # one system image GUID, which names that host until it is set.
        host = node_name
        if host is None and role[n.guid] == "adapter":
            host = n.sysimgguid or n.guid
        ports = ports_of.get(n.guid, [])
        if len(ports) > 1:
            ports.sort(key=lambda p: p[0])
        leaf = None
        for p in ports:
            if nodes[p[1]].kind == "switch":
                leaf = p
                break
        rate: Rate | None = leaf[3].rate if leaf else (ports[0][3].rate if ports else None)
        adapters.append(
            {
                "guid": n.guid,
                "port_guids": {str(k): v for k, v in sorted(n.port_guids.items())},
                "description": n.description,
                "role": role[n.guid],
                "node": node_name,
                # the machine it is in: its node, or its system image GUID
                "host": host,
                "host_note": "node description not set" if host != node_name else None,
                "device": device,
                "device_number": device_number(device),
                "rail": rail,
                "lid": n.lid,
                "leaf_guid": leaf[1] if leaf else None,
                "leaf_port": leaf[2] if leaf else None,
                "rate": rate_info[rate][0],
                "rate_text": rate_info[rate][1],
                "ports": [
                    {
                        "port": p,
                        "peer_guid": g,
                        "peer_port": pp,
                        "rate": rate_info[lk.rate][0],
                        "rate_text": rate_info[lk.rate][1],
                    }
                    for p, g, pp, lk in ports
                ],
            }
        )
    adapters.sort(
        key=lambda a: (a["node"] or "~", a["device_number"] or 0, a["device"] or "", a["guid"])
    )
    return adapters


def _switch_rows(
    fabric: Fabric,
    switches: list[Node],
    tier: dict[str, str],
    hops: dict[str, int],
    adapters: list[dict[str, Any]],
    leaf_rail: dict[str, int],
    leaf_rail_name: dict[str, str],
) -> list[dict[str, Any]]:
    attached: Counter[str] = Counter()
    for ad in adapters:
        if ad["role"] == "adapter" and ad["leaf_guid"] is not None:
            attached[ad["leaf_guid"]] += 1
    degree: Counter[str] = Counter()
    for link in fabric.links:
        degree[link.a.guid] += 1
        degree[link.b.guid] += 1
    switch_rows: list[dict[str, Any]] = [
        {
            "guid": n.guid,
            "description": n.description,
            "tier": tier[n.guid],
            "hops": hops.get(n.guid),
            "ports": n.nports,
            "connected_ports": degree[n.guid],
            "adapters": attached[n.guid],
            "lid": n.lid,
            # the rail's device name as most of its adapters give it; rail_index its number
            "rail": leaf_rail_name.get(n.guid),
            "rail_index": leaf_rail.get(n.guid),
        }
        for n in switches
    ]
    switch_rows.sort(key=lambda s: (TIER_RANK[s["tier"]], s["description"], s["guid"]))
    return switch_rows
