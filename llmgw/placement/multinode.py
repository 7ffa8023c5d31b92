"""Choosing the nodes of a replica that spans several machines.

The hard rule is structural: every option below is built from the members of
one group (one multi-node NVLink domain, or one declared fabric), so there is
no path that mixes two fabrics. A replica across two fabrics starts, passes
its health checks and hangs on its first collective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from llmgw.locations import label as level_label

from . import power
from .node_state import NodeState, Refusal, Replicas
from .rule_text import plural
from .types import Profile, Reason

Candidate = tuple[NodeState, tuple[int, ...]]
Option = tuple[tuple[object, ...], str, list[Candidate]]
# A set preference put first and a power cap refused: its rank, and why.
Refused = tuple[tuple[object, ...], Refusal]

NVLINK_PREFIX = "nvlink:"
PART = "@"


def fabric_adapters(n: NodeState, fabric: str) -> tuple[str, ...]:
    return tuple(n.view.fabrics.get(fabric, ()))


def same_fabric(key: str, declared: str) -> bool:
    """Whether a node's fabric key is (a physical part of) the declared name."""
    return key == declared or key.startswith(declared + PART)


@dataclass(slots=True)
class MultiPlan:
    # "ib-a", or "nvlink:<domain>" for a multi-node NVLink domain.
    fabric: str | None
    chosen: list[Candidate]


def _key(
    n: NodeState, fabric: str | None, model: str, cls: str | None, replicas: Replicas
) -> tuple[int, ...]:
    # Fewest of the model's replicas on the node and in its rack, as for one
    # node; then short-trained cables last, weights already there, and the
    # emptiest machines: a multi-node replica is the least movable thing in
    # the cluster.
    return (
        *replicas.of(n, model),
        fabric is not None and fabric in n.view.degraded_fabrics,
        model not in n.view.holds_weights,
        -n.free_count(cls),
        n.ordinal,
    )


def _rank(keys: list[tuple[int, ...]], kind: int, leaf: int, label: str) -> tuple[object, ...]:
    # Whole-set comparison: fewest replicas of the model already on the
    # nodes, then in their racks; a multi-node NVLink domain before a fabric,
    # one leaf, fewest short cables, fewest nodes without the weights, the
    # most free GPUs in all, then node order. (Comparing the sorted keys one
    # by one would let one good node carry a set of poor ones.)
    sums = tuple(sum(k[i] for k in keys) for i in range(5))
    return (*sums[:2], kind, leaf, *sums[2:], tuple(sorted(k[5] for k in keys)), label)


def within(members: list[Candidate], p: Profile) -> dict[str, list[Candidate]]:
    """A group's members by the domain the profile keeps a replica inside;
    the whole group as one when it names none. A node that names no such
    domain cannot be shown to share one, so it is left out."""
    if p.keep_within is None:
        return {"": members}
    label = level_label(p.keep_within)
    parts: dict[str, list[Candidate]] = {}
    for c in members:
        value = c[0].view.labels.get(label)
        if value is not None:
            parts.setdefault(value, []).append(c)
    return parts


def _options(
    cands: list[Candidate], p: Profile, model: str, replicas: Replicas, capped: bool
) -> tuple[list[Option], dict[str, int], list[Refused]]:
    """Every way to form the replica inside one group (and one domain, with
    keep_within), each group's size (its largest domain's, then), and, with
    power caps, the sets preference put first that a cap refused."""
    options: list[Option] = []
    sizes: dict[str, int] = {}
    refused: list[Refused] = []
    for members, label in _groups(cands, p):
        parts = within(members, p)
        sizes[label] = max(map(len, parts.values()), default=0)
        for part in parts.values():
            options.extend(_formed(part, label, p, model, replicas, capped, refused))
    return options, sizes, refused


def _groups(cands: list[Candidate], p: Profile) -> list[tuple[list[Candidate], str]]:
    """The candidates of each multi-node NVLink domain and each fabric."""
    groups: list[tuple[list[Candidate], str]] = []
    if p.fabric is None:
        # A multi-node NVLink domain first; InfiniBand is the fallback.
        domains: dict[str, list[Candidate]] = {}
        for c in cands:
            if c[0].view.nvlink_domain is not None:
                domains.setdefault(c[0].view.nvlink_domain, []).append(c)
        for dom, members in domains.items():
            groups.append((members, NVLINK_PREFIX + dom))
        names = sorted({f for c in cands for f, a in c[0].view.fabrics.items() if a})
    else:
        # A declared name is divided by physical fabric: "ib-a@0x..." keys
        # are parts of "ib-a", and a replica is formed on one part only.
        names = sorted(
            {
                f
                for c in cands
                for f, a in c[0].view.fabrics.items()
                if a and same_fabric(f, p.fabric)
            }
        ) or [p.fabric]
    for f in names:
        groups.append(([c for c in cands if fabric_adapters(c[0], f)], f))
    return groups


def _formed(
    members: list[Candidate],
    label: str,
    p: Profile,
    model: str,
    replicas: Replicas,
    capped: bool,
    refused: list[Refused],
) -> list[Option]:
    k = p.nodes_per_replica
    cls = p.gpu_class
    if len(members) < k:
        return []
    fabric = None if label.startswith(NVLINK_PREFIX) else label
    kind = 0 if fabric is None else 1
    members.sort(key=lambda c: _key(c[0], fabric, model, cls, replicas))
    sets: list[tuple[int, list[Candidate]]] = []
    if fabric is not None:
        # Nodes under one leaf switch together when they can.
        leaves: dict[str, list[Candidate]] = {}
        for c in members:
            leaf = c[0].view.fabric_leaves.get(fabric)
            if leaf is not None:
                leaves.setdefault(leaf, []).append(c)
        sets.extend((0, m) for m in leaves.values() if len(m) >= k)
    sets.append((0 if fabric is None else 1, members))

    def rank(sel: list[Candidate], split: int) -> tuple[object, ...]:
        keys = [_key(c[0], fabric, model, cls, replicas) for c in sel]
        return _rank(keys, kind, split, label)

    options: list[Option] = []
    for split, pool in sets:
        sel = _take(pool, p, capped, refused, partial(rank, split=split))
        if sel is not None:
            options.append((rank(sel, split), label, sel))
    return options


def _take(
    pool: list[Candidate],
    p: Profile,
    capped: bool,
    refused: list[Refused],
    rank: Callable[[list[Candidate]], tuple[object, ...]],
) -> list[Candidate] | None:
    """The replica's nodes from a pool in preference order. Power is judged
    here, as each node is taken, not on the set preference made: a set
    refused whole left a group with other nodes that fit unused, so a fleet
    whose labels ordered its nodes otherwise placed a replica that the same
    fleet unlabelled refused. A node whose shard would take a capped domain
    past its cap with those taken before it is passed over; if preference
    order finds no set, the nodes that add the fewest watts are tried."""
    k = p.nodes_per_replica
    if not capped:
        return pool[:k]
    top = pool[:k]
    over = power.over_cap(_shards(top, p), p)
    if over is None:
        return top
    refused.append((rank(top), over))
    watts = {c[0].ordinal: _rise(c, p) for c in pool}
    for order in (pool, sorted(pool, key=lambda c: watts[c[0].ordinal])):
        taken: list[Candidate] = []
        for c in order:
            if power.over_cap(_shards([*taken, c], p), p) is None:
                taken.append(c)
                if len(taken) == k:
                    return taken
    return None


def _shards(sel: list[Candidate], p: Profile) -> dict[int, tuple[NodeState, float | None]]:
    return {c[0].ordinal: (c[0], power.shard_watts(c[0], p, c[1])) for c in sel}


def _rise(c: Candidate, p: Profile) -> float:
    # What the node's shard adds to its capped domains, all told.
    n = c[0]
    watts = power.shard_watts(n, p, c[1]) or 0.0
    return len(n.power) * ((power.node_draw(n, watts) or 0.0) - (power.node_draw(n) or 0.0))


def _best(options: list[Option], refused: list[Refused]) -> tuple[Option | None, Refusal | None]:
    """The best-ranked option, and why a set ranked above it was refused
    (power caps are judged as each option is formed, see _take)."""
    best = min(options, key=lambda o: o[0]) if options else None
    above = [r for r in refused if best is None or r[0] < best[0]]
    return best, (min(above, key=lambda r: r[0])[1] if above else None)


def plan(
    cands: list[Candidate], p: Profile, model: str, replicas: Replicas, capped: bool = False
) -> MultiPlan | None:
    options, _, refused = _options(cands, p, model, replicas, capped)
    best, _ = _best(options, refused)
    if best is None:
        return None
    return MultiPlan(best[1], best[2])


def unchosen(
    cands: list[Candidate], p: Profile, model: str, replicas: Replicas, capped: bool = False
) -> dict[int, Refusal]:
    """Why each node that fits a shard is not in the replica (by ordinal)."""
    k = p.nodes_per_replica
    options, sizes, refused = _options(cands, p, model, replicas, capped)
    best, over = _best(options, refused)
    if best is None and over is not None:
        # Groups that fit, every one of them over a cap: the cap is what bit.
        return {n.ordinal: (over[0], f"{n.view.name}: {over[1]}") for n, _ in cands}
    taken = {c[0].ordinal for c in best[2]} if best else set()
    # Group -> its members by the domain keep_within names.
    parts = {label: within(m, p) for m, label in _groups(cands, p)} if p.keep_within else {}
    out: dict[int, Refusal] = {}
    for n, _ in cands:
        if n.ordinal in taken:
            continue
        v = n.view
        groups = [f for f, a in v.fabrics.items() if a and f in sizes]
        problem = v.fabric_problems.get(p.fabric or "") or next(
            iter(v.fabric_problems.values()), ""
        )
        if v.nvlink_domain is not None and NVLINK_PREFIX + v.nvlink_domain in sizes:
            groups.append(NVLINK_PREFIX + v.nvlink_domain)
        if not groups and problem:
            out[n.ordinal] = (Reason.FABRIC, f"{v.name} cannot be used across nodes: {problem}")
        elif not groups:
            on = ", ".join(f for f, a in sorted(v.fabrics.items()) if a) or "no fabric"
            need = f"fabric {p.fabric}" if p.fabric else "a fabric"
            out[n.ordinal] = (
                Reason.FABRIC,
                f"{v.name} has adapters on {on}, needs {need} for a replica of {k} nodes",
            )
        elif p.keep_within is not None and _too_few_within(n, parts, p, groups):
            out[n.ordinal] = (Reason.KEEP_WITHIN, _kept_out(n, parts, p, groups))
        elif all(sizes[g] < k for g in groups):
            g = max(groups, key=lambda g: sizes[g])
            out[n.ordinal] = (
                Reason.FABRIC_TOO_SMALL,
                f"{v.name} fits, but {g} has {plural(sizes[g], 'node')} that fit, needs {k}",
            )
        elif best is not None and best[1].startswith(NVLINK_PREFIX) and v.nvlink_problem:
            out[n.ordinal] = (
                Reason.NVLINK_DOMAIN,
                f"{v.name} is kept out of the NVLink domain: {v.nvlink_problem}",
            )
        else:
            assert best is not None
            names = ", ".join(c[0].view.name for c in best[2])
            least = min(c[0].free_count(p.gpu_class) for c in best[2])
            leaves = {c[0].view.fabric_leaves.get(best[1]) for c in best[2]}
            leaf = leaves.pop() if len(leaves) == 1 else None
            under = f" under leaf {leaf}" if leaf is not None else ""
            mine = replicas.of(n, model)[0]
            holds = f" and holds {plural(mine, 'replica')} of this model already" if mine else ""
            out[n.ordinal] = (
                Reason.NOT_PREFERRED,
                f"{v.name} fits with {n.free_count(p.gpu_class)} free GPUs{holds}, but {best[1]} "
                f"took {names}{under} (fewest replicas of the model, one group, one leaf, short "
                f"cables last, weights and emptiest first: {least}+ free)"
                + (f"; a set ranked above it was refused: {over[1]}" if over else ""),
            )
    return out


def _too_few_within(
    n: NodeState, parts: dict[str, dict[str, list[Candidate]]], p: Profile, groups: list[str]
) -> bool:
    """Whether the node's own domain is too small on every group it is in."""
    assert p.keep_within is not None
    value = n.view.labels.get(level_label(p.keep_within))
    if value is None:
        return True
    return all(len(parts.get(g, {}).get(value, ())) < p.nodes_per_replica for g in groups)


def _kept_out(
    n: NodeState, parts: dict[str, dict[str, list[Candidate]]], p: Profile, groups: list[str]
) -> str:
    """Why keep_within leaves the node out, naming every domain tried."""
    level = p.keep_within
    assert level is not None
    k = p.nodes_per_replica
    value = n.view.labels.get(level_label(level))
    if value is None:
        return f"{n.view.name} names no {level}, needs one: the profile keeps a replica within one"
    tried: dict[str, int] = {}
    for g in groups:
        for v, part in parts.get(g, {}).items():
            tried[v] = max(tried.get(v, 0), len(part))
    listed = ", ".join(f"{level} {v}: {count}" for v, count in sorted(tried.items()))
    return (
        f"{n.view.name} fits, but its {level} {value} has "
        f"{plural(tried.get(value, 0), 'node')} that fit on one fabric, needs {k} "
        f"(keep_within {level}; tried {listed})"
    )
