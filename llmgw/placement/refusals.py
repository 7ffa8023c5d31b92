"""Why every node a decision did not take was refused, node by node, with
the number that bit. Worked out on demand against the fleet as it was
when the decision was made (Inventory.apply materialises pending ones
first). Pure, like the scheduler."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import multinode
from .node_state import NodeState, Replicas
from .rule_text import plural
from .rules import pick_gpus
from .types import Decision, Profile, Reason, Rejection, Shard
from .verdicts import Judge


def rejections(
    nodes: Sequence[NodeState],
    by_name: Mapping[str, NodeState],
    ok: frozenset[int],
    replicas: Replicas,
    model: str,
    p: Profile,
    decision: Decision | None,
    capped: bool = False,
) -> tuple[Rejection, ...]:
    """Every node but the decision's own, in node order; `ok` holds the
    nodes the profile's static rules already let through."""
    chosen = {s.node: s for s in decision.shards} if decision else {}
    judge = Judge(p)
    out: list[tuple[int, Rejection]] = []
    cands: list[multinode.Candidate] = []
    for n in nodes:
        name = n.view.name
        if name in chosen:
            # The replica's own nodes stay candidates, so the multi-node
            # choice is re-made over the same set it was made from.
            if p.nodes_per_replica > 1:
                cands.append((n, chosen[name].gpu_indices))
            continue
        # Rules no decision changes were settled when the index was built.
        refusal = judge.dynamic(n) if n.ordinal in ok else judge.static(n)
        if refusal is not None:
            out.append((n.ordinal, Rejection(name, refusal[0], refusal[1], p.name)))
        else:
            gpus = pick_gpus(n, p)
            assert gpus is not None
            cands.append((n, gpus))
    if p.nodes_per_replica > 1:
        unchosen = multinode.unchosen(cands, p, model, replicas, capped)
        for o, (reason, message) in unchosen.items():
            out.append((o, Rejection(nodes[o].view.name, reason, message, p.name)))
    else:
        # A single-node profile with any candidate always places.
        assert decision is not None or not cands
        for n, _ in cands:
            assert decision is not None
            winner = by_name[decision.shards[0].node]
            message = not_preferred(replicas, model, p, n, winner, decision.shards[0])
            out.append((n.ordinal, Rejection(n.view.name, Reason.NOT_PREFERRED, message, p.name)))
    out.sort(key=lambda r: r[0])
    return tuple(r for _, r in out)


def not_preferred(
    replicas: Replicas, model: str, p: Profile, n: NodeState, winner: NodeState, shard: Shard
) -> str:
    name = n.view.name
    # Counted before the decision was applied, as everything here is.
    near, far = replicas.of(n, model), replicas.of(winner, model)
    if near[0] > far[0]:
        return (
            f"{name} fits, but holds {plural(near[0], 'replica')} of this model already "
            f"and {winner.view.name} holds {far[0] or 'none'}"
        )
    if near[1] > far[1]:
        return f"{name} fits, but {crowded(replicas, model, n, winner)}"
    if shard.holds_weights and model not in n.view.holds_weights:
        return f"{name} fits, but {winner.view.name} already holds the weights of {model}"
    if p.gpu_class is not None:
        # Counted before the decision was applied: the winner's cards were still free.
        mine, theirs = n.free_count(p.gpu_class), winner.free_count(p.gpu_class)
        if mine == theirs:
            # Nothing above set them apart: the last tie-break is the node
            # order (scheduler.py's docstring), which the line must name.
            return (
                f"{name} fits with {mine} free {p.gpu_class} GPUs, as many as "
                f"{winner.view.name}; with nothing else between them, "
                f"{winner.view.name} comes first in node order"
            )
        return (
            f"{name} fits with {mine} free {p.gpu_class} GPUs, but {winner.view.name} "
            f"has {theirs} free and partly used nodes fill first"
        )
    why = "has no GPUs to keep free" if not winner.has_gpus else "is already in use"
    return f"{name} fits, but {winner.view.name} {why} and comes first"


def crowded(replicas: Replicas, model: str, n: NodeState, winner: NodeState) -> str:
    """The largest spread level at which the node's domain holds more of the
    model's replicas than the winner's, both counts named."""
    for (level, mine, near), (_, theirs, far) in zip(
        replicas.levels(n, model), replicas.levels(winner, model), strict=True
    ):
        if near > far:
            there = (
                f"{winner.view.name}'s {level} {theirs} holds {far or 'none'}"
                if theirs is not None
                else f"{winner.view.name} names no {level}"
            )
            ours = f"its {level} {mine}" if mine is not None else f"it (naming no {level})"
            return f"{ours} holds {plural(near, 'replica')} of this model already and {there}"
        if near < far:
            break
    return "another node's domains hold fewer replicas of this model"
