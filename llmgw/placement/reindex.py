"""Re-indexing a few replaced nodes of an Inventory copy (Inventory.replaced)
rather than indexing the whole fleet again: a what-if sweep fails each of
hundreds of racks of a fleet of thousands in turn, and a fresh index per
rack cost more than every decision placed after it. Pure, like the
scheduler."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

from .checks import NodeState, Replicas, static_refusal
from .index import Eligible, tier_of
from .types import Profile

Changed = Sequence[tuple[NodeState, NodeState]]


def recount(replicas: Replicas, old: NodeState, new: NodeState) -> None:
    """The node's replicas become what its new view says, and its domains'
    counts with them; counts that reach zero are dropped, as a fresh index
    never holds them (a model with none left places as one never placed)."""
    touched = []
    for model, nodes in replicas.on_node.items():
        count = nodes.get(old.ordinal)
        if count:
            touched.append((model, count))
    for model, count in touched:
        replicas.add(model, old, -count)
    for model, count in new.view.models.items():
        if count:
            replicas.add(model, new, count)
    for model, _ in touched:
        nodes = replicas.on_node[model]
        if nodes.get(old.ordinal) == 0:
            del nodes[old.ordinal]
        if not nodes:
            del replicas.on_node[model]
        counts = replicas.in_domain.get(model)
        if counts is not None:
            for domain in old.domains:
                if domain in counts and not counts[domain]:
                    del counts[domain]
            if not counts:
                del replicas.in_domain[model]


def take_out(
    e: Eligible,
    changed: Changed,
    models: set[str],
    near: Sequence[NodeState],
    replicas: Replicas,
) -> dict[str, list[int]]:
    """Before the counts change: take the replaced nodes out of one profile
    kind's grids, and out of each model's spread the nodes whose tier may
    move (for a model whose count changes, every node sharing a domain with
    a replaced one). Returns, per model, the nodes taken out of its spread."""
    cls = e.gpu_class
    if cls is None:
        return {}
    for old, _ in changed:
        if old.ordinal in e.ok:
            e.grid.remove(old.ordinal, old.gpu_shape(cls))
            for model, grid in e.holders.items():
                if model in old.view.holds_weights:
                    grid.remove(old.ordinal, old.gpu_shape(cls))
    taken: dict[str, list[int]] = {}
    olds = [old for old, _ in changed]
    for model, spread in e.spread.items():
        out = taken[model] = []
        for n in near if model in models else olds:
            if n.ordinal in e.ok:
                spread.remove(tier_of(replicas, n, model), n.ordinal, n.gpu_shape(cls))
                out.append(n.ordinal)
    return taken


def put_back(
    e: Eligible,
    changed: Changed,
    p: Profile,
    taken: dict[str, list[int]],
    nodes: Sequence[NodeState],
    replicas: Replicas,
) -> None:
    """After: the replaced nodes in again where the kind's static rules
    still let them in, and every node taken out at its tier now. A model
    that runs nowhere any more loses its spread, as a fresh index has none."""
    gone = [o.ordinal for o, n in changed if o.ordinal in e.ok and static_refusal(n, p)]
    came = [n.ordinal for o, n in changed if o.ordinal not in e.ok and not static_refusal(n, p)]
    if gone or came:
        # Most replaced nodes stay in (a replica released): the sets stay too.
        ordered = list(e.ordered)
        for o in gone:
            del ordered[bisect_left(ordered, o)]
        for o in came:
            insort(ordered, o)
        e.ok, e.ordered = frozenset(ordered), ordered
    ok = e.ok
    cls = e.gpu_class
    if cls is None:
        return
    for _, new in changed:
        if new.ordinal in ok:
            e.grid.add(new.ordinal, new.gpu_shape(cls))
            for model, grid in e.holders.items():
                if model in new.view.holds_weights:
                    grid.add(new.ordinal, new.gpu_shape(cls))
    for model in list(e.spread):
        if model not in replicas.on_node:
            del e.spread[model]
            continue
        spread = e.spread[model]
        again = set(taken.get(model, ())) | {new.ordinal for _, new in changed}
        for o in sorted(again & ok):
            n = nodes[o]
            spread.add(tier_of(replicas, n, model), o, n.gpu_shape(cls))
