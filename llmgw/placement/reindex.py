"""Re-indexing a few replaced nodes of an Inventory copy (Inventory.replaced)
rather than indexing the whole fleet again: a what-if sweep fails each of
hundreds of racks of a fleet of thousands in turn, and a fresh index per
rack cost more than every decision placed after it. Pure, like the
scheduler."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

from .index import Eligible
from .node_state import NodeState, Replicas
from .spread import Groups, key_of
from .types import Profile
from .verdicts import Judge

Changed = Sequence[tuple[NodeState, NodeState]]


def recount(replicas: Replicas, old: NodeState, new: NodeState, held: dict[str, int]) -> None:
    """The node's replicas become what its new view says, and its domains'
    counts with them; counts that reach zero are dropped, as a fresh index
    never holds them (a model with none left places as one never placed).
    `held`: what it runs as counted before."""
    touched = [(model, count) for model, count in held.items() if count]
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
    e: Eligible, changed: Changed, p: Profile, replicas: Replicas, groups: Groups
) -> list[int]:
    """Before the counts change: take the replaced nodes out of one profile
    kind's grids and out of each model's spread, where they were filed.
    Returns the nodes the kind's static rules no longer let in."""
    cls = e.gpu_class
    inside = [old for old, _ in changed if old.ordinal in e.ok]
    fits = Judge(p).fits
    gone = [old.ordinal for old, new in changed if old.ordinal in e.ok and not fits(new)]
    if cls is None:
        return gone
    for old in inside:
        shape = old.gpu_shape(cls)
        e.grid.remove(old.ordinal, shape)
        for model, grid in e.holders.items():
            if model in old.view.holds_weights:
                grid.remove(old.ordinal, shape)
    if not e.spread:
        return gone
    # Groups whose every node of the kind leaves it go whole: a failed rack
    # or PDU is a group or two of a fleet labelled down to its PDUs.
    leaving = set(gone)
    whole = {
        g
        for g in {groups.of[o] for o in gone}
        if all(o in leaving for o in groups.members[g] if o in e.ok)
    }
    for model, spread in e.spread.items():
        for g in whole:
            spread.drop(g)
        for old in inside:
            if groups.of[old.ordinal] not in whole:
                spread.remove(key_of(groups, replicas, old, model), old.ordinal, old.gpu_shape(cls))
    return gone


def put_back(
    e: Eligible,
    changed: Changed,
    p: Profile,
    gone: list[int],
    models: set[str],
    replicas: Replicas,
    groups: Groups,
) -> None:
    """After: the replaced nodes in again where the kind's static rules
    still let them in, and the groups around them at their tiers now for
    the models whose counts changed. A model that runs nowhere any more
    loses its spread, as a fresh index has none."""
    fits = Judge(p).fits
    came = [n.ordinal for o, n in changed if o.ordinal not in e.ok and fits(n)]
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
    back = [new for _, new in changed if new.ordinal in ok]
    for new in back:
        shape = new.gpu_shape(cls)
        e.grid.add(new.ordinal, shape)
        for model, grid in e.holders.items():
            if model in new.view.holds_weights:
                grid.add(new.ordinal, shape)
    related = sorted({h for _, new in changed for h in groups.related[groups.of[new.ordinal]]})
    for model in list(e.spread):
        if model not in replicas.on_node:
            del e.spread[model]
            continue
        spread = e.spread[model]
        counts = replicas.in_domain.get(model)
        for new in back:
            key = key_of(groups, replicas, new, model)
            spread.file(key, new.ordinal, new.gpu_shape(cls), groups, counts)
        if model in models:
            spread.rescore(related, groups, counts)
