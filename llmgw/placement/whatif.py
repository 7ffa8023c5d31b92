"""What if a facility domain (a site, room, row, rack or PDU) or one node
failed now: which held replicas go with it, and could placement put each
of them back somewhere else?

Answered by doing what the control plane would do, on a copy: the domain's
nodes stop reporting (NotReady, as the inventory calls a node that did),
every replica with a shard on one of them is lost and released whole,
claims on its surviving nodes included, and the reconciler places the lost
replicas again, model by model in name order, one replica at a time, each
decision applied before the next. The same scheduler decides, on the same
views, so every rule placement knows (holds, power caps, spread) applies
here as it does there. Pure, like the scheduler: the serving service loads
the fleet and turns the answer into words.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from llmgw.locations import LABEL_PREFIX, LEVELS

from .claims import apply_to_views, released
from .power import DomainPower
from .scheduler import Inventory
from .types import Decision, NodeView, Placement, Profile, gc_paused

# What a node that stopped reporting is, as the inventory says it.
FAILED_STATE = "NotReady"
# What `whatif sweep` fails one at a time.
SWEPT = ("rack", "pdu")


class WhatIfError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class HeldReplica:
    """A live replica as placement would have decided it: its shards' nodes,
    GPUs and declared claims."""

    id: int
    decision: Decision

    @property
    def model(self) -> str:
        return self.decision.model


@dataclass(slots=True)
class Fleet:
    views: list[NodeView]
    replicas: list[HeldReplica]
    # Model -> its catalog profiles, and its always_running count.
    profiles: Mapping[str, Sequence[Profile]]
    always_running: Mapping[str, int]
    # Domain ("rack=r07", or a node's name) -> its nodes; built on first use.
    _domains: dict[str, list[str]] | None = None
    _base: Inventory | None = None
    _by_name: dict[str, NodeView] | None = None
    _on_node: dict[str, list[int]] | None = None
    _live: dict[str, int] | None = None

    def domains(self) -> dict[str, list[str]]:
        if self._domains is None:
            self._domains = domain_members(self.views)
        return self._domains

    def base(self) -> Inventory:
        """The fleet indexed once, every held model's grids built, so each
        failure's copy starts from them rather than building its own."""
        if self._base is None:
            self._base = Inventory(self.views)
            for model in sorted({r.model for r in self.replicas}):
                for p in self.profiles.get(model, ()):
                    self._base.decide(model, p)
        return self._base

    def on_node(self) -> dict[str, list[int]]:
        """Node -> the replicas (by position) with a shard on it."""
        if self._on_node is None:
            self._on_node = defaultdict(list)
            for i, r in enumerate(self.replicas):
                for n in dict.fromkeys(r.decision.nodes):
                    self._on_node[n].append(i)
        return self._on_node

    def live(self) -> dict[str, int]:
        """Model -> its held replicas, before any failure."""
        if self._live is None:
            self._live = defaultdict(int)
            for r in self.replicas:
                self._live[r.model] += 1
        return self._live

    def by_name(self) -> dict[str, NodeView]:
        if self._by_name is None:
            self._by_name = {v.name: v for v in self.views}
        return self._by_name


def domain_members(views: Iterable[NodeView]) -> dict[str, list[str]]:
    """Every domain the fleet's labels name, and every node by its name."""
    members: dict[str, list[str]] = defaultdict(list)
    for v in views:
        members[v.name].append(v.name)
        for level in LEVELS:
            value = v.labels.get(LABEL_PREFIX + level)
            if value:
                members[f"{level}={value}"].append(v.name)
    return dict(members)


def resolve(fleet: Fleet, domain: str) -> list[str]:
    """The nodes of a domain written LEVEL=VALUE or as a node's name."""
    domain = domain.strip()
    level, sep, value = domain.partition("=")
    if sep and level not in LEVELS:
        raise WhatIfError(
            f"unknown domain {domain!r}: the level {level!r} is not one of {', '.join(LEVELS)}"
        )
    if sep and not value:
        raise WhatIfError(f"unknown domain {domain!r}: name the {level} after the '='")
    nodes = fleet.domains().get(domain)
    if not nodes:
        what = f"no node is labelled {LABEL_PREFIX}{level}={value}" if sep else "no such node"
        raise WhatIfError(f"unknown domain {domain!r}: {what}")
    return nodes


@dataclass(slots=True)
class Lost:
    replica: HeldReplica
    # The nodes of the domain it had a shard on.
    on: tuple[str, ...]
    # Where placement would put it again; None when nowhere.
    decision: Decision | None = None
    # Why not, when it could not be placed (the first refusal of its model
    # carries the explanation; the model's later ones are refused as well).
    placement: Placement | None = None


@dataclass(slots=True)
class Outcome:
    domain: str
    nodes: list[str]
    lost: list[Lost] = field(default_factory=list)
    # The copy of the fleet after the failure and the re-placements.
    inventory: Inventory | None = None

    def below(self, fleet: Fleet) -> dict[str, tuple[int, int]]:
        """Held models left below always_running: model -> (after, wanted)."""
        live = defaultdict(int, fleet.live())
        for lost in self.lost:
            if lost.decision is None:
                live[lost.replica.model] -= 1
        return {
            model: (live[model], wanted)
            for model, wanted in sorted(fleet.always_running.items())
            if wanted and live[model] < wanted
        }


@dataclass(frozen=True, slots=True)
class PowerRow:
    """A capped domain's draw before the failure and after the re-placements;
    watts, None when no node in it knows its draw."""

    domain: str
    cap_w: float
    before_w: float | None
    after_w: float | None
    # Nodes whose draw nobody knows, left out of the sums.
    unknown: int

    @property
    def headroom_w(self) -> float | None:
        return None if self.after_w is None else self.cap_w - self.after_w


def power_after(fleet: Fleet, outcome: Outcome) -> list[PowerRow]:
    """Every capped domain's draw afterwards. The failed nodes are counted as
    they last reported: a node that stopped reporting may still draw (a
    rack's switch failing cuts no power), and a cap is a limit not to pass."""
    before = {d.key: d for d in fleet.base().power_domains()}
    after = (outcome.inventory or fleet.base()).power_domains()
    rows = []
    for d in sorted(after, key=lambda d: d.key):
        was = before.get(d.key)
        rows.append(PowerRow(d.key, d.cap, _draw(was) if was else None, _draw(d), d.unknown))
    return rows


def _draw(d: DomainPower) -> float | None:
    # Only unknown nodes: unknown, not zero.
    return None if d.unknown and not d.draw else round(d.draw, 1)


def lost_replicas(fleet: Fleet, nodes: Sequence[str]) -> list[Lost]:
    on_node = fleet.on_node()
    gone = set(nodes)
    hit = sorted({i for n in nodes for i in on_node.get(n, ())})
    out = []
    for i in hit:
        r = fleet.replicas[i]
        out.append(Lost(r, tuple(n for n in r.decision.nodes if n in gone)))
    # The reconciler's order: models by name, each model's replicas in turn.
    out.sort(key=lambda lost: (lost.replica.model, lost.replica.id))
    return out


def fail(fleet: Fleet, domain: str, *, explain: bool = True) -> Outcome:
    """Fail one domain and place its lost replicas again, on a copy.

    As the reconciler does it: model by model, each model's lost replicas
    released whole just before they are placed again (a later model's
    still hold their claims on surviving nodes meanwhile)."""
    nodes = resolve(fleet, domain)
    outcome = Outcome(domain.strip(), nodes, lost_replicas(fleet, nodes))
    if not outcome.lost:
        outcome.inventory = fleet.base()
        return outcome
    by_name = fleet.by_name()
    views = _Views(by_name, [replace(by_name[n], state=FAILED_STATE) for n in nodes])
    by_model: dict[str, list[Lost]] = defaultdict(list)
    for lost in outcome.lost:
        by_model[lost.replica.model].append(lost)
    inv = fleet.base()
    # The failed nodes go with the first model's release, in one copy. Only
    # the models still to place need their spreads kept current on it.
    touched = set(nodes)
    ahead = set(by_model)
    for model, losses in by_model.items():
        decisions = [lost.replica.decision for lost in losses]
        touched |= {s.node for d in decisions for s in d.shards}
        freed = released(views.read(sorted(touched)), decisions)
        views.now.update((v.name, v) for v in freed)
        if inv is fleet.base():
            inv = inv.copy(ahead)
        inv.replace(freed)
        touched = set()
        ahead.discard(model)
        _replace_model(fleet, inv, views, model, losses, explain, ahead)
    outcome.inventory = inv
    return outcome


def _replace_model(
    fleet: Fleet,
    inv: Inventory,
    views: _Views,
    model: str,
    losses: list[Lost],
    explain: bool,
    ahead: set[str],
) -> None:
    profiles = fleet.profiles.get(model, ())
    for lost in losses:
        lost.decision, _ = inv.first_fit(model, profiles)
        if lost.decision is None:
            if explain:
                lost.placement = inv.place(model, profiles)
            # Nothing changes before its next one is tried: refused too, as
            # the reconciler stops a model at its first refusal.
            return
        if lost is losses[-1]:
            # The model is not placed again on this copy: its spread is not
            # read again, so keeping it current would be wasted.
            inv.keep_spreads(ahead)
        inv.apply(lost.decision)
        views.placed(lost.decision)


class _Views:
    """The nodes that changed on a copy, as they now read. A placement's
    claims are written into a node's view when a later release reads the
    node, not before: most nodes placed on are never released again."""

    __slots__ = ("by_name", "now", "pending")

    def __init__(self, by_name: dict[str, NodeView], changed: list[NodeView]) -> None:
        self.by_name = by_name
        self.now = {v.name: v for v in changed}
        self.pending: dict[str, list[Decision]] = {}

    def placed(self, decision: Decision) -> None:
        for n in dict.fromkeys(decision.nodes):
            self.pending.setdefault(n, []).append(decision)

    def read(self, names: Iterable[str]) -> list[NodeView]:
        out = []
        for n in names:
            v = self.now.get(n) or self.by_name[n]
            for d in self.pending.pop(n, ()):
                [v] = apply_to_views([v], d)
            out.append(v)
        return out


def sweep(fleet: Fleet, levels: Sequence[str] = SWEPT) -> tuple[int, list[Outcome]]:
    """Fail every domain of the levels, one at a time. Returns how many were
    tried and the ones that would leave a held model below always_running."""
    for level in levels:
        if level not in LEVELS:
            raise WhatIfError(f"unknown level {level!r}: expected one of {', '.join(LEVELS)}")
    wanted = [d for d in sorted(fleet.domains()) if d.partition("=")[0] in levels and "=" in d]
    hurt = []
    # Each failure copies part of the index and drops it: many small objects
    # and no cycles. Left on, the collector walked the whole fleet again and
    # again meanwhile, a third of the sweep at 5,000 nodes.
    with gc_paused():
        for domain in wanted:
            outcome = fail(fleet, domain, explain=False)
            if outcome.below(fleet):
                hurt.append(outcome)
    return len(wanted), hurt
