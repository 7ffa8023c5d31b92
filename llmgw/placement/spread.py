"""A model's spread index: the nodes one kind of profile may use, filed by
domain group, so that a placement re-sorts a few groups rather than refiling
every node near it. Pure, like the scheduler that keeps it up to date.

A node's spread score for a model (node_state.Replicas.of) is its own replicas
of the model times the weight of the levels it names no value for, plus the
model's replicas in each room, row, rack and PDU it names, weighted by
level. Nodes naming the same value at every level (a group: in a fleet
labelled down to the PDU, the nodes on one PDU) share that second part, so
one more replica in a rack raises the score of its groups, not of each of
their nodes. Filed node by node, a placement moved every node of its rack
between tiers; and a what-if sweep, which copies the fleet once per failed
rack or PDU and releases and places replicas on each copy, paid that for
every lost replica and for every model whose replicas it released. Filed by
group, a copy shares each group's grids until one changes, so a failure
touches only the groups of the domain that failed and of the nodes the
lost replicas go to.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

from .grid import Found, Grid, best_fit
from .node_state import NodeState, Replicas
from .types import Profile
from .verdicts import Checks

# A tier, tried lowest first: (replicas of the model on the node, its spread
# score, the node lacks the model's weights). A key: (the node's group, its
# replicas of the model, it lacks the weights), the nodes of a group that
# share a tier whatever the counts become.
Key = tuple[int, int, bool]
Domain = tuple[str, str]
# Groups to re-sort at once beyond which the order is sorted again whole.
BULK = 64


class Groups:
    """The fleet's domain groups, by node ordinal. Labels do not change in a
    copy of the fleet (Inventory.replace refuses it), so copies share one."""

    __slots__ = ("of", "members", "first", "weighted", "alone", "related")

    def __init__(self, nodes: Sequence[NodeState]) -> None:
        ids: dict[object, int] = {}
        self.of: list[int] = []
        self.members: list[list[int]] = []
        self.weighted: list[tuple[tuple[int, Domain], ...]] = []
        self.alone: list[int] = []
        for n in nodes:
            g = ids.get(n.domains)
            if g is None:
                g = ids[n.domains] = len(self.weighted)
                self.weighted.append(n.weighted)
                self.alone.append(n.alone)
                self.members.append([])
            self.of.append(g)
            self.members[g].append(n.ordinal)
        # Each group's first node: groups are numbered in node order.
        self.first = [members[0] for members in self.members]
        by_domain: dict[Domain, list[int]] = {}
        names = [tuple(d for _, d in ws) for ws in self.weighted]
        for g, named in enumerate(names):
            for domain in named:
                by_domain.setdefault(domain, []).append(g)
        # A domain most groups name (a fleet's one hall, but for a few
        # unlabelled nodes) moved most scores with each replica placed in
        # it: at 5,000 nodes in one hall beside 64 nodes naming none, every
        # placement re-scored all 2,500 groups, a third of its time. Scored
        # inverted instead, the groups that do not name it lose its weight
        # times its count, and those that do gain nothing: every score
        # moves by the same amount, so the order is the same, and a replica
        # placed there re-scores only the few groups outside it. A domain
        # every group names (the complement empty) drops out altogether.
        total = len(self.weighted)
        inverted = {d: gs for d, gs in by_domain.items() if 2 * len(gs) > total > 1}
        outside: dict[Domain, list[int]] = {}
        if inverted:
            weight = {d: w for ws in self.weighted for w, d in ws if d in inverted}
            for domain, gs in inverted.items():
                inside = set(gs)
                outside[domain] = [h for h in range(total) if h not in inside]
            extra: list[list[tuple[int, Domain]]] = [[] for _ in range(total)]
            for domain, hs in outside.items():
                for h in hs:
                    extra[h].append((-weight[domain], domain))
            self.weighted = [
                tuple(w for w in ws if w[1] not in inverted) + tuple(extra[g])
                for g, ws in enumerate(self.weighted)
            ]
        # Each group's groups whose scores move with a replica placed in it:
        # for each domain it names, those naming it too (itself among
        # them), or for an inverted one those outside it (not itself: its
        # score holds still). A group naming nothing shares nothing: only
        # its node's own count moves.
        self.related: list[list[int]] = [
            sorted(
                {
                    h
                    for domain in named
                    for h in (outside[domain] if domain in inverted else by_domain[domain])
                }
            )
            for named in names
        ]

    def base(self, g: int, counts: dict[Domain, int] | None) -> int:
        """The group's spread score with none of the model's replicas on the node."""
        score = 0
        if counts:
            get = counts.get
            for weight, domain in self.weighted[g]:
                score += weight * get(domain, 0)
        return score


def key_of(groups: Groups, replicas: Replicas, n: NodeState, model: str) -> Key:
    nodes = replicas.on_node.get(model)
    mine = nodes.get(n.ordinal, 0) if nodes else 0
    return groups.of[n.ordinal], mine, model not in n.view.holds_weights


class Spread:
    """One model's eligible nodes, a grid per group and tier within it,
    tried lowest tier first, best fit within a tier.

    Never a node with more of the model's replicas, in it or around it,
    while one with fewer fits. Grids are shared with the copy a spread was
    made from until one changes (grid).
    """

    __slots__ = ("grids", "owned", "scores", "keys", "order", "first")

    def __init__(self, first: list[int]) -> None:
        # Groups.first, shared.
        self.first = first
        self.grids: dict[Key, Grid] = {}
        # The grids no copy shares, which may change in place.
        self.owned: set[Key] = set()
        # Each key's score as filed in order, and each group's keys.
        self.scores: dict[Key, int] = {}
        self.keys: dict[int, tuple[Key, ...]] = {}
        # (mine, score, lacks, group) per key, sorted: a key's tier, then its
        # group; flat, as a placement re-sorts a few of them.
        self.order: list[tuple[int, int, bool, int]] = []

    def copy(self) -> Spread:
        other = Spread.__new__(Spread)
        other.first = self.first
        other.grids = dict(self.grids)
        other.scores = dict(self.scores)
        other.keys = dict(self.keys)
        other.order = list(self.order)
        # From here both sides share every grid: neither changes one in place.
        self.owned, other.owned = set(), set()
        return other

    def grid(self, key: Key) -> Grid:
        """The key's grid, to change: copied first if shared."""
        grid = self.grids[key]
        if key not in self.owned:
            grid = self.grids[key] = grid.copy()
            self.owned.add(key)
        return grid

    def file(
        self,
        key: Key,
        ordinal: int,
        shape: tuple[int, int],
        groups: Groups,
        counts: dict[Domain, int] | None,
    ) -> None:
        grid = self.grids.get(key)
        if grid is None:
            grid = self.grids[key] = Grid()
            self.owned.add(key)
            g, mine, lacks = key
            score = self.scores[key] = mine * groups.alone[g] + groups.base(g, counts)
            insort(self.order, (mine, score, lacks, g))
            self.keys[g] = (*self.keys.get(g, ()), key)
        elif key not in self.owned:
            grid = self.grid(key)
        grid.add(ordinal, shape)

    def remove(self, key: Key, ordinal: int, shape: tuple[int, int]) -> None:
        grid = self.grid(key)
        grid.remove(ordinal, shape)
        # Its rows are trimmed as they empty: none left is no node left.
        if not grid.sizes:
            self._forget(key)
            g = key[0]
            left = tuple(k for k in self.keys[g] if k != key)
            if left:
                self.keys[g] = left
            else:
                del self.keys[g]

    def _forget(self, key: Key) -> None:
        del self.grids[key]
        self.owned.discard(key)
        g, mine, lacks = key
        order = self.order
        del order[bisect_left(order, (mine, self.scores.pop(key), lacks, g))]

    def drop(self, g: int) -> None:
        """The group's nodes gone from the kind's eligible nodes at once (a
        failed rack or PDU): its grids go whole rather than node by node."""
        for key in self.keys.pop(g, ()):
            self._forget(key)

    def rescore(
        self, gids: Sequence[int], groups: Groups, counts: dict[Domain, int] | None
    ) -> None:
        """The groups' tiers again, after the model's counts changed."""
        order, scores = self.order, self.scores
        if len(gids) > BULK:
            self._rescore_all(gids, groups, counts)
            return
        for g in gids:
            keys = self.keys.get(g)
            if not keys:
                continue
            base = groups.base(g, counts)
            alone = groups.alone[g]
            for key in keys:
                mine = key[1]
                score = mine * alone + base
                old = scores[key]
                if score != old:
                    lacks = key[2]
                    del order[bisect_left(order, (mine, old, lacks, g))]
                    insort(order, (mine, score, lacks, g))
                    scores[key] = score

    def _rescore_all(
        self, gids: Sequence[int], groups: Groups, counts: dict[Domain, int] | None
    ) -> None:
        """rescore for many groups at once (a placement in a hall that most
        of the fleet shares, but not all of it: every group in the hall
        moves). Moving each key's place in the order one at a time cost a
        bisect, a delete and an insert apiece; scoring them all and sorting
        the order again, already nearly sorted, costs a fraction of that."""
        scores, keys = self.scores, self.keys
        base, alone = groups.base, groups.alone
        for g in gids:
            mine_keys = keys.get(g)
            if mine_keys:
                b, a = base(g, counts), alone[g]
                for key in mine_keys:
                    scores[key] = key[1] * a + b
        self.order = sorted((k[1], score, k[2], k[0]) for k, score in scores.items())

    def best_fit(self, nodes: list[NodeState], p: Profile, checks: Checks) -> Found:
        gps = p.gpus_per_shard
        grids = self.grids
        # Every group's grid of a tier: best fit over them together.
        same: list[tuple[int, Grid]] = []
        top = 0
        tier = (-1, -1, False)
        for mine, score, lacks, g in self.order:
            if score != tier[1] or mine != tier[0] or lacks != tier[2]:
                if same:
                    found = best_fit(same, top, self.first, nodes, p, checks)
                    if found is not None:
                        return found
                    same, top = [], 0
                tier = (mine, score, lacks)
            grid = grids[g, mine, lacks]
            # Past the first few, a tier's nodes mostly have too few GPUs free.
            rows = len(grid.sizes)
            if rows > gps:
                same.append((g, grid))
                if rows > top:
                    top = rows
        return best_fit(same, top, self.first, nodes, p, checks) if same else None
