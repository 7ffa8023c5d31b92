"""Power caps per facility domain: what a shard would take a domain to.

Each node counts the largest known of three figures: declared (what its
shards' profiles say they draw), derived (its GPUs' enforced power limits)
and measured (GPU power plus CPU package power). None of them is right
alone: declared is what an operator guessed, derived misses the CPUs and
the fans, measured misses a shard that has not started yet. Unknown stays
unknown: a node with no figure at all adds nothing to its domain and the
refusal says so, rather than counting it as zero watts drawn.

Pure, like the scheduler that calls it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .node_state import DomainPower, NodeState, Refusal, largest
from .types import Profile, Reason

__all__ = ["DomainPower", "apply", "claimed", "node_draw", "over_cap", "refusal", "shard_watts"]


def node_draw(n: NodeState, add: float = 0.0) -> float | None:
    """The node's largest known draw with `add` more watts on it: a new
    shard raises what is declared and what will be measured, not the
    cards' limits, which already count every card."""
    declared = n.declared_w
    if declared is not None or add:
        declared = (declared or 0.0) + add
    measured = None if n.measured_w is None else n.measured_w + add
    return largest(declared, n.view.derived_w, measured)


def shard_watts(n: NodeState, p: Profile, gpus: Iterable[int]) -> float | None:
    """What one shard adds: the profile's power_w, else its cards' limits."""
    if p.power_w is not None:
        return p.power_w
    limits = [g.power_limit_w for g in n.view.gpus if g.index in set(gpus)]
    if not limits or any(w is None for w in limits):
        return None
    return float(sum(w for w in limits if w is not None))


def kw(watts: float | None, what: str) -> str:
    return f"{what} unknown" if watts is None else f"{watts / 1000:.1f} kW {what}"


def domain_name(key: str) -> str:
    """ "rack=r07" as "rack r07"; a bare node name as "node <name>"."""
    level, sep, value = key.partition("=")
    return f"{level} {value}" if sep else f"node {key}"


def refusal(n: NodeState, p: Profile, gpus: Iterable[int]) -> Refusal | None:
    """Why one shard on the node would take a capped domain past its cap."""
    watts = shard_watts(n, p, gpus)
    return over_cap({n.ordinal: (n, watts)}, p)


def over_cap(shards: dict[int, tuple[NodeState, float | None]], p: Profile) -> Refusal | None:
    """Shards by node ordinal: the first domain they would take past its cap."""
    rises: dict[str, tuple[DomainPower, float, float | None]] = {}
    first: dict[str, NodeState] = {}
    for n, watts in shards.values():
        before = node_draw(n) or 0.0
        rise = (node_draw(n, watts or 0.0) or 0.0) - before
        for d in n.power:
            dom, total, added = rises.get(d.key, (d, 0.0, 0.0))
            added = None if added is None or watts is None else added + watts
            rises[d.key] = (dom, total + rise, added)
            first.setdefault(d.key, n)
    for key, (d, rise, added) in rises.items():
        if d.draw + rise > d.cap:
            n = first[key]
            what = "declared" if p.power_w is not None else "derived from its GPUs' limits"
            adds = "an unknown draw" if added is None else kw(added, what)
            nodes = "1 node" if d.unknown == 1 else f"{d.unknown} nodes"
            unknown = f", {nodes} of unknown draw" if d.unknown else ""
            # Where the domain is now, then the shard: "would reach 8.8 kW"
            # read wrong of a domain already at 8.8 kW that the shard barely moves.
            return (
                Reason.POWER_CAP,
                f"{n.view.name} is in {domain_name(key)}, which is at {_now(d)} "
                f"of its {kw(d.cap, 'cap')} ({kw(d.measured, 'measured')}, "
                f"{kw(d.derived, 'derived')}, {kw(d.declared, 'declared')}{unknown}); "
                f"this shard adds {adds}",
            )
    return None


def _now(d: DomainPower) -> str:
    # Only nodes of unknown draw: unknown, not 0.0 kW.
    return "an unknown draw" if d.unknown and not d.draw else f"{d.draw / 1000:.1f} kW"


def claimed(before: float | None, watts: float | None, declared: bool) -> float | None:
    """A node view's declared or measured figure with a shard's watts added
    (taken back, negative). What is declared starts from nothing; what was
    never measured stays unknown (unknown is not zero); a draw never goes
    below nothing."""
    if not watts or (before is None and (not declared or watts < 0)):
        return before
    return max((before or 0.0) + watts, 0.0)


def apply(n: NodeState, watts: float | None) -> None:
    """Record a shard's watts on the node and its capped domains."""
    if not watts:
        return
    before = node_draw(n)
    after = node_draw(n, watts)
    # Now known, where it was not: counted among the nodes that know it.
    declares = n.declared_w is None
    n.declared_w = (n.declared_w or 0.0) + watts
    if n.measured_w is not None:
        n.measured_w += watts
    for d in n.power:
        d.declared = (d.declared or 0.0) + watts
        if declares:
            d.knows[0] += 1
        if n.measured_w is not None and d.measured is not None:
            d.measured += watts
        if before is None:
            d.unknown -= 1
            d.knows[3] += 1
        d.draw += (after or 0.0) - (before or 0.0)
