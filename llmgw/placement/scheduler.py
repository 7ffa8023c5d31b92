"""The scheduler: highest-priority profile that fits, and why not elsewhere.

Pure: views in, a decision and its explanation out. `Inventory` is a working
copy of the fleet indexed for placement (index.py: free GPUs bucketed by
count, the rules that allocations cannot change cached per profile), so a
decision costs a few bucket lookups instead of a pass over every node;
`apply` updates the copy, which is how headroom dry-runs the scheduler. Why
every other node was refused is refusals.py's.

Preference order, all among nodes that satisfy every rule:
- the fewest replicas of the model already on the node, then in its room,
  row, rack and PDU (labels llmgw.io/room ... llmgw.io/pdu, where named),
  so one node, rack or breaker going down does not take every replica with
  it; a preference, never a filter: a model with more replicas than racks
  still places them all;
- weights already on the node first (a preference, never a filter: fetching
  them is a valid answer, refusing to place is not);
- a single-node GPU shard best-fits the fewest free GPUs of its class, so
  partly used nodes fill first and whole nodes stay free for models that
  cannot be split; a CPU shard prefers nodes without GPUs, then used ones;
- a multi-node replica takes the emptiest machines (see multinode.py, which
  ranks its own preferences after the same spread);
- then the order the nodes were given in.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterable, Sequence
from functools import partial

from . import multinode, power, refusals, reindex, verdicts
from . import spread as spreads
from .index import Eligible, build_spread, spread_applied
from .multinode import fabric_adapters
from .node_state import NodeState, Replicas
from .types import (
    Attempts,
    Decision,
    Explanation,
    NodeView,
    Placement,
    Profile,
    Rejection,
    RejectionSource,
    Shard,
    gc_paused,
    location_of,
)
from .verdicts import Judge, StaticKey, fast_checks, fit, static_key


class Inventory:
    """A mutable, indexed copy of the fleet; never touches the views given."""

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        with gc_paused():
            self._nodes = [NodeState(i, v) for i, v in enumerate(nodes)]
        self._by_name: dict[str, NodeState] = {}
        for n in self._nodes:
            if n.view.name in self._by_name:
                raise ValueError(f"node {n.view.name} appears twice")
            self._by_name[n.view.name] = n
        self._holders: dict[str, list[int]] = {}
        self._replicas = Replicas()
        # The nodes' domain groups (spread.py), on first use; copies share them.
        self._groups: spreads.Groups | None = None
        # Capped domain -> its power, shared by its nodes' states.
        self._power: dict[str, power.DomainPower] = {}
        for n in self._nodes:
            for model in n.view.holds_weights:
                self._holders.setdefault(model, []).append(n.ordinal)
            for model, count in n.view.models.items():
                if count:
                    self._replicas.add(model, n, count)
            for key, cap in n.view.budgets:
                d = self._power.get(key)
                if d is None:
                    d = self._power[key] = power.DomainPower(key, cap)
                d.count(n.view.declared_w, n.view.derived_w, n.view.measured_w)
                n.power.append(d)
        # Built on first use of each kind of profile, then kept up to date.
        self._eligible_by_key: dict[StaticKey, Eligible] = {}
        # A profile of each kind, to judge a replaced node by (replaced).
        self._kinds: dict[StaticKey, Profile] = {}
        self._pending: weakref.WeakSet[Explanation] = weakref.WeakSet()
        # The nodes no other copy shares, which apply may change in place.
        self._owned: set[int] = set(range(len(self._nodes)))

    def _eligible(self, p: Profile) -> Eligible:
        key = static_key(p)
        eligible = self._eligible_by_key.get(key)
        if eligible is None:
            with gc_paused():
                fits = Judge(p).fits
                ok = [n for n in self._nodes if fits(n)]
                eligible = Eligible(p.gpu_class, ok)
            self._eligible_by_key[key] = eligible
            self._kinds[key] = p
        return eligible

    def node(self, name: str) -> NodeState:
        """One node's state as this copy has it, decisions applied."""
        return self._by_name[name]

    def spread(self, name: str, model: str) -> tuple[int, int]:
        """The model's replicas on the node and its spread score, as this
        copy counts them, decisions applied."""
        return self._replicas.of(self._by_name[name], model)

    def power_domains(self) -> list[power.DomainPower]:
        """The capped domains as this copy counts their draw, decisions applied."""
        return list(self._power.values())

    def copy(self, spreads: Collection[str] | None = None) -> Inventory:
        """Nodes are shared until a decision is applied to one (_own): a dry
        run copies a fleet of thousands and changes a handful of them. With
        spreads, only those models' spreads come along (see keep_spreads)."""
        other = Inventory.__new__(Inventory)
        other._nodes = list(self._nodes)
        other._by_name = dict(self._by_name)
        # From here both sides share every node: neither changes one in place.
        self._owned, other._owned = set(), set()
        other._replicas = self._replicas.copy()
        other._power = {k: d.copy() for k, d in self._power.items()}
        for n in self._nodes if self._power else ():
            if n.power:
                other._own(n.view.name).power = [other._power[d.key] for d in n.power]
        other._holders, other._groups, other._kinds = self._holders, self._groups, self._kinds
        other._eligible_by_key = {k: e.copy(spreads) for k, e in self._eligible_by_key.items()}
        other._pending = weakref.WeakSet()
        return other

    def keep_spreads(self, models: Collection[str]) -> None:
        """Keep only these models' spreads current; a decision builds another again."""
        for e in self._eligible_by_key.values():
            for m in [m for m in e.spread if m not in models]:
                del e.spread[m]

    def _own(self, name: str) -> NodeState:
        n = self._by_name[name]
        if n.ordinal in self._owned:
            return n
        m = NodeState.__new__(NodeState)
        for slot in NodeState.__slots__:
            setattr(m, slot, getattr(n, slot))
        m.free = {cls: list(free) for cls, free in n.free.items()}
        self._nodes[n.ordinal] = self._by_name[name] = m
        self._owned.add(n.ordinal)
        return m

    def replaced(self, views: Iterable[NodeView]) -> Inventory:
        """A copy with these nodes as the views now say (see replace)."""
        other = self.copy()
        other.replace(views)
        return other

    def _indexed(self, name: str) -> NodeState:
        """The node as indexed now, which replace and rewatt change."""
        old = self._by_name.get(name)
        if old is None:
            raise ValueError(f"node {name} is not in the inventory")
        return old

    def replace(self, views: Iterable[NodeView]) -> None:
        """These nodes as the views now say (a node stopped reporting, a
        replica was released), as a fresh Inventory would index them,
        re-indexing only those nodes and, for the models whose counts change,
        their groups' tiers (spread.py): what-if fails each rack of a large
        fleet in turn. Where a node sits and what weights it holds must not
        change."""
        self._materialize()
        changed: list[tuple[NodeState, NodeState]] = []
        for v in views:
            old = self._indexed(v.name)
            if v.labels != old.view.labels or v.holds_weights != old.view.holds_weights:
                raise ValueError(f"node {v.name}: replaced views keep labels and weights")
            changed.append((old, NodeState(old.ordinal, v, old)))
        replicas = self._replicas
        # What each node runs as counted now, and the models whose counts
        # change: their spreads' tiers move.
        held: dict[int, dict[str, int]] = {old.ordinal: {} for old, _ in changed}
        for m, on in replicas.on_node.items():
            for o in on.keys() & held.keys():
                held[o][m] = on[o]
        models = {
            m
            for old, new in changed
            for m in {*held[old.ordinal], *new.view.models}
            if held[old.ordinal].get(m, 0) != new.view.models.get(m, 0)
        }
        groups = self._grouped()
        gone = {
            key: reindex.take_out(e, changed, self._kinds[key], replicas, groups)
            for key, e in self._eligible_by_key.items()
        }
        for old, new in changed:
            reindex.recount(replicas, old, new, held[old.ordinal])
            self._nodes[new.ordinal] = self._by_name[new.view.name] = new
            self._owned.add(new.ordinal)
        self._repower(changed)
        for key, e in self._eligible_by_key.items():
            reindex.put_back(e, changed, self._kinds[key], gone[key], models, replicas, groups)

    def rewatt(self, views: Iterable[NodeView]) -> None:
        """These nodes' power figures as the views now say, and nothing
        else of them (readings.with_readings): measured draw and the
        cards' power limits, by which no grid, spread or static rule files
        a node, so nothing is filed again; only their capped domains are
        counted again. The warm fleet reads every capped node's readings
        on a timer, and replacing 5,000 of them cost seconds."""
        self._materialize()
        changed: list[tuple[NodeState, NodeState]] = []
        for v in views:
            old = self._indexed(v.name)
            new = NodeState.__new__(NodeState)
            for slot in NodeState.__slots__:
                setattr(new, slot, getattr(old, slot))
            new.free = {cls: list(free) for cls, free in old.free.items()}
            new.view, new.declared_w, new.measured_w = v, v.declared_w, v.measured_w
            self._nodes[new.ordinal] = self._by_name[v.name] = new
            self._owned.add(new.ordinal)
            changed.append((old, new))
        self._repower(changed)

    def _grouped(self) -> spreads.Groups:
        if self._groups is None:
            self._groups = spreads.Groups(self._nodes)
        return self._groups

    def _materialize(self) -> None:
        # Explanations still unread were judged against the state before a
        # change. (Most are dropped unread: iterating an empty WeakSet still costs.)
        if self._pending:
            for explanation in list(self._pending):
                explanation.materialize()
            self._pending = weakref.WeakSet()

    def _repower(self, changed: list[tuple[NodeState, NodeState]]) -> None:
        """Count the capped domains of replaced nodes again: each node's
        old figures out and its new ones in, where it stays in the same
        domains and few nodes changed. A domain as wide as a hall holds
        most of the fleet, and counting it again from every node cost
        each placement beside 5,000 nodes a pass over all of them. Many
        changed (the power timer reads every capped node again) count
        their domains again from the nodes, which also leaves no rounding
        from the sums taken apart."""
        if (
            len(changed) * 8 < len(self._nodes)
            and len({old.ordinal for old, _ in changed}) == len(changed)
            and all(old.view.budgets == new.view.budgets for old, new in changed)
        ):
            for old, new in changed:
                new.power = old.power
                for d in old.power:
                    d.uncount(old.declared_w, old.view.derived_w, old.measured_w)
                    d.count(new.declared_w, new.view.derived_w, new.measured_w)
            return
        keys = {d.key for old, _ in changed for d in old.power}
        keys |= {key for _, new in changed for key, _ in new.view.budgets}
        if not keys:
            return
        for key in keys:
            cap = next(c for n in self._nodes for k, c in n.view.budgets if k == key)
            self._power[key] = power.DomainPower(key, cap)
        for n in self._nodes:
            if any(k in keys for k, _ in n.view.budgets):
                n = self._own(n.view.name)
                n.power = [self._power[k] for k, _ in n.view.budgets]
                for key in keys & {k for k, _ in n.view.budgets}:
                    self._power[key].count(n.declared_w, n.view.derived_w, n.measured_w)

    # -- deciding ---------------------------------------------------------

    def place(self, model: str, profiles: Sequence[Profile]) -> Placement:
        """Try profiles highest priority first (ties in the order given),
        and why every node was refused for each profile tried."""
        decision, attempts = self.first_fit(model, profiles)
        return self.explained(model, profiles, decision, attempts)

    def first_fit(
        self, model: str, profiles: Sequence[Profile]
    ) -> tuple[Decision | None, Attempts]:
        """The priority loop, the one every caller places by: highest
        priority first, ties in the order given, until one fits; the
        decision and the profiles tried, nothing judged node by node."""
        attempts: list[tuple[str, int, bool]] = []
        decision: Decision | None = None
        for p in sorted(profiles, key=lambda p: -p.priority):
            decision = self.decide(model, p)
            attempts.append((p.name, p.priority, decision is not None))
            if decision is not None:
                break
        return decision, tuple(attempts)

    def explained(
        self,
        model: str,
        profiles: Sequence[Profile],
        decision: Decision | None,
        attempts: Attempts,
    ) -> Placement:
        """The decision with its explanation: every node judged for each
        profile tried, on this copy as it stands (lazily, but before it
        changes). A stored decision is explained by the same words, its
        own claims taken out of the copy by the caller."""
        by_name = {p.name: p for p in profiles}
        sources: list[RejectionSource] = [
            partial(self._explain, model, by_name[name], decision if placed else None)
            for name, _, placed in attempts
            if name in by_name
        ]
        explanation = Explanation(model, attempts, sources)
        self._pending.add(explanation)
        return Placement(model, decision, explanation)

    def decide(self, model: str, p: Profile) -> Decision | None:
        """One profile, no explanation: what place and headroom build on."""
        if p.nodes_per_replica > 1:
            return self._decide_multi(model, p)
        picked = self._pick_gpu(model, p) if p.gpu_class else self._pick_cpu(model, p)
        if picked is None:
            return None
        return self._decision(model, p, None, [picked])

    def _pick_gpu(self, model: str, p: Profile) -> tuple[NodeState, tuple[int, ...]] | None:
        eligible = self._eligible(p)
        checks = fast_checks(p, bool(self._power))
        if model in self._replicas.on_node:
            mine = eligible.spread.get(model)
            if mine is None:
                near = {*self._holders.get(model, ()), *self._replicas.on_node[model]}
                mine = build_spread(
                    eligible, model, self._nodes, self._replicas, self._grouped(), near
                )
            return mine.best_fit(self._nodes, p, checks)
        holders = self._holders.get(model)
        if holders:
            grid = eligible.holders.get(model)
            if grid is None:
                grid = eligible.holder_grid(model, [self._nodes[o] for o in holders])
            found = grid.best_fit(self._nodes, p, checks)
            if found is not None:
                return found
        return eligible.grid.best_fit(self._nodes, p, checks)

    def _pick_cpu(self, model: str, p: Profile) -> tuple[NodeState, tuple[int, ...]] | None:
        eligible = self._eligible(p)
        checks = fast_checks(p, bool(self._power))
        hosted = model in self._replicas.on_node
        holders = [o for o in self._holders.get(model, ()) if o in eligible.ok]
        best: tuple[tuple[int, int, bool, bool, bool], NodeState] | None = None
        # The holders first, then the rest: the best key each pass can reach.
        for pool, floor in ((holders, (0, 0, False)), (eligible.ordered, (0, 0, True))):
            if best is not None and best[0][:3] <= floor:
                break
            for o in pool:
                n = self._nodes[o]
                if fit(n, p, checks) is None:
                    continue
                mine, rack = self._replicas.of(n, model) if hosted else (0, 0)
                # GPU nodes last, keeping their cards reachable; used nodes
                # first, once the model's replicas are spread.
                key = (mine, rack, model not in n.view.holds_weights, n.has_gpus, not n.used)
                if best is None or key < best[0]:
                    best = (key, n)
                    if key == (*floor, False, False):
                        break
        return None if best is None else (best[1], ())

    def _candidates(self, p: Profile) -> list[multinode.Candidate]:
        checks = fast_checks(p, bool(self._power))
        out: list[multinode.Candidate] = []
        for o in self._eligible(p).ordered:
            n = self._nodes[o]
            gpus = fit(n, p, checks)
            if gpus is not None:
                out.append((n, gpus))
        return out

    def _decide_multi(self, model: str, p: Profile) -> Decision | None:
        chosen = multinode.plan(self._candidates(p), p, model, self._replicas, bool(self._power))
        if chosen is None:
            return None
        return self._decision(model, p, chosen.fabric, chosen.chosen)

    def _decision(
        self,
        model: str,
        p: Profile,
        fabric: str | None,
        picked: list[tuple[NodeState, tuple[int, ...]]],
    ) -> Decision:
        shards = []
        for n, gpus in picked:
            uuids = {g.index: g.uuid for g in n.view.gpus}
            adapters = fabric_adapters(n, fabric) if fabric else ()
            shards.append(
                Shard(
                    node=n.view.name,
                    gpu_indices=gpus,
                    gpu_uuids=tuple(uuids[i] for i in gpus),
                    adapters=adapters,
                    cpu_cores=p.cpu_cores,
                    memory_bytes=p.memory_bytes,
                    holds_weights=model in n.view.holds_weights,
                    power_w=power.shard_watts(n, p, gpus),
                    location=location_of(n.view.labels),
                )
            )
        env = {}
        leaf: str | None = None
        short: tuple[str, ...] = ()
        if fabric is not None and fabric.startswith(multinode.NVLINK_PREFIX):
            env["NCCL_MNNVL_ENABLE"] = "1"
        elif fabric is not None:
            leaves = {n.view.fabric_leaves.get(fabric) for n, _ in picked}
            leaf = leaves.pop() if len(leaves) == 1 else None
            short = tuple(n.view.name for n, _ in picked if fabric in n.view.degraded_fabrics)
        return Decision(model, p.name, tuple(shards), fabric, env, leaf, short)

    # -- applying ---------------------------------------------------------

    def apply(self, decision: Decision) -> None:
        """Record a decision's claims on this copy of the fleet."""
        self._materialize()
        model = decision.model
        for shard in decision.shards:
            n = self._own(shard.node)
            before = {cls: n.gpu_shape(cls) for cls in n.free}
            # What each rule takes: its cards, memory, cores, watts.
            verdicts.reserve(n, shard)
            after = {
                cls: n.gpu_shape(cls) if shard.gpu_indices else old for cls, old in before.items()
            }
            # What in_use says of the views once this shard is among them,
            # whatever it claims.
            n.used = True
            # One more of the model's replicas on the node and in its domains.
            replicas = self._replicas
            counts = replicas.on_node.get(model)
            was = counts.get(n.ordinal, 0) if counts else 0
            replicas.add(model, n)
            for e in self._eligible_by_key.values():
                cls = e.gpu_class
                if cls is None:
                    continue
                # A class with no free card before has none after: (0, 0) both.
                old, new = before.get(cls, (0, 0)), after.get(cls, (0, 0))
                if new != old and n.ordinal in e.ok:
                    e.grid.move(n.ordinal, old, new)
                    for held in n.view.holds_weights:
                        grid = e.holders.get(held)
                        if grid is not None:
                            grid.move(n.ordinal, old, new)
                if e.spread:
                    spread_applied(e, model, n, was, (old, new), replicas, self._grouped())

    # -- explaining -------------------------------------------------------

    def _explain(self, model: str, p: Profile, decision: Decision | None) -> tuple[Rejection, ...]:
        ok = self._eligible(p).ok
        return refusals.rejections(
            self._nodes, self._by_name, ok, self._replicas, model, p, decision, bool(self._power)
        )


def place(model: str, profiles: Sequence[Profile], nodes: Iterable[NodeView]) -> Placement:
    """Place one replica of `model`: the highest-priority profile that fits."""
    return Inventory(nodes).place(model, profiles)


def headroom(
    model: str,
    profiles: Sequence[Profile],
    nodes: Iterable[NodeView] | Inventory,
    *,
    limit: int = 10_000,
) -> dict[str, int]:
    """How many more replicas of each profile fit, each profile on its own.

    Dry-runs the scheduler on a copy of the inventory, applying every
    decision to the copy, so the answer is what placement would really do
    rather than free GPUs divided by GPUs per replica.
    """
    base = nodes if isinstance(nodes, Inventory) else Inventory(nodes)
    room: dict[str, int] = {}
    for p in profiles:
        inv = base.copy()
        count = 0
        while count < limit:
            decision = inv.decide(model, p)
            if decision is None:
                break
            inv.apply(decision)
            count += 1
        room[p.name] = count
    return room
