"""Choosing the nodes of a replica that spans several machines.

The hard rule is structural: every option below is built from the members of
one group (one multi-node NVLink domain, or one declared fabric), so there is
no path that mixes two fabrics. A replica across two fabrics starts, passes
its health checks and hangs on its first collective.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import NodeState, Refusal, fabric_adapters, plural
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


def _fabric_key(n: NodeState, fabric: str, model: str, cls: str | None) -> tuple[int, ...]:
    # Short-trained cables last, then weights already there, then the emptiest
    # machines: a multi-node replica is the least movable thing in the cluster.
    return (
        fabric in n.view.degraded_fabrics,
        model not in n.view.holds_weights,
        -n.free_count(cls),
        n.ordinal,
    )


def _domain_key(n: NodeState, model: str, cls: str | None) -> tuple[int, ...]:
    return (model not in n.view.holds_weights, -n.free_count(cls), n.ordinal)


def _degraded(sel: list[Candidate], fabric: str) -> int:
    return sum(fabric in c[0].view.degraded_fabrics for c in sel)


def _score(keys: list[tuple[int, ...]]) -> tuple[object, ...]:
    # Whole-set comparison: fewest nodes without the weights, then the most
    # free GPUs in all, then node order. (Comparing the sorted keys one by one
    # would let one good node carry a set of poor ones.)
    return (sum(k[0] for k in keys), sum(k[1] for k in keys), tuple(sorted(k[2] for k in keys)))


def _options(
    cands: list[Candidate], p: Profile, model: str
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
                members.sort(key=lambda c: _domain_key(c[0], model, cls))
                sel = members[:k]
                options.append(
                    (
                        (0, 0, 0, *_score([_domain_key(c[0], model, cls) for c in sel]), label),
                        label,
                        sel,
                    )
                )
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
        members.sort(key=lambda c: _fabric_key(c[0], f, model, cls))
        # Nodes under one leaf switch together when they can.
        leaves: dict[str, list[Candidate]] = {}
        for c in members:
            leaf = c[0].view.fabric_leaves.get(f)
            if leaf is not None:
                leaves.setdefault(leaf, []).append(c)
        for leaf_members in leaves.values():
            if len(leaf_members) >= k:
                sel = leaf_members[:k]
                keys = [_fabric_key(c[0], f, model, cls)[1:] for c in sel]
                options.append(((1, 0, _degraded(sel, f), *_score(keys), f), f, sel))
        sel = members[:k]
        keys = [_fabric_key(c[0], f, model, cls)[1:] for c in sel]
        options.append(((1, 1, _degraded(sel, f), *_score(keys), f), f, sel))
    return options, sizes


def plan(cands: list[Candidate], p: Profile, model: str) -> MultiPlan | None:
    options, _ = _options(cands, p, model)
    if not options:
        return None
    _, label, sel = min(options, key=lambda o: o[0])
    return MultiPlan(label, sel)


def unchosen(cands: list[Candidate], p: Profile, model: str) -> dict[int, Refusal]:
    """Why each node that fits a shard is not in the replica (by ordinal)."""
    k = p.nodes_per_replica
    options, sizes = _options(cands, p, model)
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
            out[n.ordinal] = (
                Reason.NOT_PREFERRED,
                f"{v.name} fits with {n.free_count(p.gpu_class)} free GPUs, but {best[1]} "
                f"took {names}{under} (one group, one leaf, short cables last, weights and "
                f"emptiest first: {least}+ free)",
            )
    return out
