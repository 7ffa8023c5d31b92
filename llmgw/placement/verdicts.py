"""The rule table (llmgw/placement/rules.py) put to use: the kinds of
profile the index keeps apart, the fast fit, the refusals explain asks for
and what a decision applied reserves, each a loop over RULES."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from .node_state import NodeState, Refusal
from .rules import RULES, Check, Gpus, Rule, pick_gpus
from .types import Profile, Shard


@contextmanager
def registered(rule: Rule) -> Iterator[Rule]:
    """The table with one more rule, last, while the block runs."""
    RULES.append(rule)
    _kinds.clear()
    _reservers.clear()
    try:
        yield rule
    finally:
        RULES.remove(rule)
        _kinds.clear()
        _reservers.clear()


StaticKey = tuple[object, ...]


def static_key(p: Profile) -> StaticKey:
    """The profile's fields the static rules read: profiles that share
    them share an index."""
    return kind(p).key


class Kind:
    """What the table says of one profile, worked out once: every decision
    asks it, and a profile is asked of thousands of decisions."""

    __slots__ = ("key", "checks", "capped")

    def __init__(self, p: Profile) -> None:
        self.key = tuple(
            _hashable(getattr(p, f)) for r in RULES if r.static for f in r.profile_fields
        )
        self.checks = _fast_checks(p, False)
        self.capped = _fast_checks(p, True)


# id(profile) -> the profile (kept, so the id is not reused) and its kind.
_kinds: dict[int, tuple[Profile, Kind]] = {}


def kind(p: Profile) -> Kind:
    hit = _kinds.get(id(p))
    if hit is not None and hit[0] is p:
        return hit[1]
    if len(_kinds) >= 1024:
        _kinds.clear()
    found = Kind(p)
    _kinds[id(p)] = (p, found)
    return found


def _hashable(value: object) -> object:
    if isinstance(value, Mapping):
        return tuple(sorted(value.items()))
    return value


def static_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """Rules that applying decisions cannot change; cached per profile."""
    return Judge(p).static(n)


def dynamic_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """The rules that applying decisions changes."""
    return Judge(p).dynamic(n)


def shard_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """Every per-node rule, in the order an operator would fix them."""
    judge = Judge(p)
    return judge.static(n) or judge.dynamic(n)


class Judge:
    """The table's refusals for one profile, the rules that cannot refuse
    anything for it left out: explain asks them of every node."""

    __slots__ = ("p", "statics", "dynamics", "checks")

    def __init__(self, p: Profile) -> None:
        self.p = p
        self.statics = [r.refusal for r in RULES if r.static and r.applies(p)]
        self.dynamics = [
            (r.refusal, r.needs_gpus) for r in RULES if not r.static and (r.applies(p) or r.picks)
        ]
        self.checks = [r.fits for r in RULES if r.static and r.applies(p)]

    def static(self, n: NodeState) -> Refusal | None:
        p = self.p
        for refusal in self.statics:
            found = refusal(n, p, ())
            if found is not None:
                return found
        return None

    def dynamic(self, n: NodeState) -> Refusal | None:
        p = self.p
        gpus: Gpus | None = ()
        picked = False
        for refusal, needs_gpus in self.dynamics:
            if needs_gpus and not picked:
                gpus, picked = pick_gpus(n, p), True
            found = refusal(n, p, gpus)
            if found is not None:
                return found
        return None

    def fits(self, n: NodeState) -> bool:
        """The static rules' fast checks: no message is made."""
        p = self.p
        for fits in self.checks:
            if not fits(n, p, ()):
                return False
        return True


# A profile's fast checks: those asked before its GPUs are picked, then after.
Checks = tuple[tuple[Check, ...], tuple[Check, ...]]


def fast_checks(p: Profile, capped: bool) -> Checks:
    """The dynamic rules' fast checks that can refuse a node for the
    profile; the power cap's only on a fleet with caps."""
    found = kind(p)
    return found.capped if capped else found.checks


def _fast_checks(p: Profile, capped: bool) -> Checks:
    asked = [
        r
        for r in RULES
        if not r.static and not r.picks and r.applies(p) and (capped or not r.capped)
    ]
    return (
        tuple(r.fits for r in asked if not r.needs_gpus),
        tuple(r.fits for r in asked if r.needs_gpus),
    )


def fit(n: NodeState, p: Profile, checks: Checks) -> Gpus | None:
    """The GPUs one shard takes on the node, or None where a dynamic rule
    refuses it (the scheduler's fast path: no message is made)."""
    before, after = checks
    for fits in before:
        if not fits(n, p, ()):
            return None
    gpus = pick_gpus(n, p)
    if gpus is None:
        return None
    for fits in after:
        if not fits(n, p, gpus):
            return None
    return gpus


def reserve(n: NodeState, shard: Shard) -> None:
    """What a shard of a decision applied takes of the node, rule by rule."""
    reservers = _reservers
    if not reservers:
        reservers.extend(r.reserve for r in RULES if not r.static)
    for take in reservers:
        take(n, shard)


# The dynamic rules' reserve, in table order; filled on first use.
_reservers: list[Callable[[NodeState, Shard], None]] = []
