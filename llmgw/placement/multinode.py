"""Choosing the nodes of a replica that spans several machines.

The hard rule is structural: every option below is built from the members of
one group (one multi-node NVLink domain, or one declared fabric), so there is
no path that mixes two fabrics. A replica across two fabrics starts, passes
its health checks and hangs on its first collective.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import NodeState, Refusal, Replicas, fabric_adapters, plural
from .types import Profile, Reason

Candidate = tuple[NodeState, tuple[int, ...]]

NVLINK_PREFIX = "nvlink:"
PART = "@"


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


def _options(
    cands: list[Candidate], p: Profile, model: str, replicas: Replicas
) -> tuple[list[tuple[tuple[object, ...], str, list[Candidate]]], dict[str, int]]:
    """Every way to form the replica inside one group, and each group's size."""
    k = p.nodes_per_replica
    cls = p.gpu_class
    options: list[tuple[tuple[object, ...], str, list[Candidate]]] = []
    sizes: dict[str, int] = {}
    if p.fabric is None:
        # A multi-node NVLink domain first; InfiniBand is the fallback.
        domains: dict[str, list[Candidate]] = {}
        for c in cands:
            if c[0].view.nvlink_domain is not None:
                domains.setdefault(c[0].view.nvlink_domain, []).append(c)
        for dom, members in domains.items():
            label = NVLINK_PREFIX + dom
            sizes[label] = len(members)
            if len(members) >= k:
                members.sort(key=lambda c: _key(c[0], None, model, cls, replicas))
                sel = members[:k]
                keys = [_key(c[0], None, model, cls, replicas) for c in sel]
                options.append((_rank(keys, 0, 0, label), label, sel))
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
        members = [c for c in cands if fabric_adapters(c[0], f)]
        sizes[f] = len(members)
        if len(members) < k:
            continue
        members.sort(key=lambda c: _key(c[0], f, model, cls, replicas))
        # Nodes under one leaf switch together when they can.
        leaves: dict[str, list[Candidate]] = {}
        for c in members:
            leaf = c[0].view.fabric_leaves.get(f)
            if leaf is not None:
                leaves.setdefault(leaf, []).append(c)
        for leaf_members in leaves.values():
            if len(leaf_members) >= k:
                sel = leaf_members[:k]
                keys = [_key(c[0], f, model, cls, replicas) for c in sel]
                options.append((_rank(keys, 1, 0, f), f, sel))
        sel = members[:k]
        keys = [_key(c[0], f, model, cls, replicas) for c in sel]
        options.append((_rank(keys, 1, 1, f), f, sel))
    return options, sizes


def plan(cands: list[Candidate], p: Profile, model: str, replicas: Replicas) -> MultiPlan | None:
    options, _ = _options(cands, p, model, replicas)
    if not options:
        return None
    _, label, sel = min(options, key=lambda o: o[0])
    return MultiPlan(label, sel)


def unchosen(
    cands: list[Candidate], p: Profile, model: str, replicas: Replicas
) -> dict[int, Refusal]:
    """Why each node that fits a shard is not in the replica (by ordinal)."""
    k = p.nodes_per_replica
    options, sizes = _options(cands, p, model, replicas)
    best = min(options, key=lambda o: o[0]) if options else None
    taken = {c[0].ordinal for c in best[2]} if best else set()
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
                f"cables last, weights and emptiest first: {least}+ free)",
            )
    return out
