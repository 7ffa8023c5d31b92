"""The scheduler's index of the fleet: free GPUs bucketed by count and
NVLink island, per kind of profile, per model's weights and per model's
spread, so a decision costs a few bucket lookups instead of a pass over
every node. Pure, like the scheduler that keeps it up to date."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .grid import Grid
from .node_state import NodeState, Replicas
from .spread import Groups, Spread, key_of


class Eligible:
    """The nodes one kind of profile may use at all, and their grids.

    Kept per profile kind rather than once for the fleet, so a profile that
    only a tenth of the fleet may take scans that tenth, not the rest; a
    grid per model of the nodes holding its weights, so preferring them does
    not mean visiting every one of them on every decision; and, once a model
    runs somewhere, its nodes by group and tier (spread.py), so spreading it
    does not either.
    """

    __slots__ = ("gpu_class", "ok", "ordered", "grid", "holders", "spread")

    def __init__(self, gpu_class: str | None, ok: list[NodeState]) -> None:
        self.gpu_class = gpu_class
        self.ok = frozenset(n.ordinal for n in ok)
        self.ordered = [n.ordinal for n in ok]
        self.grid = self._grid(ok)
        self.holders: dict[str, Grid] = {}
        self.spread: dict[str, Spread] = {}

    def _grid(self, nodes: list[NodeState]) -> Grid:
        grid = Grid()
        if self.gpu_class is not None:
            for n in nodes:
                grid.cell(*n.gpu_shape(self.gpu_class)).append(n.ordinal)
            grid.sizes = [sum(map(len, row)) for row in grid.cells]
        return grid

    def holder_grid(self, model: str, holders: list[NodeState]) -> Grid:
        grid = self.holders.get(model)
        if grid is None:
            grid = self.holders[model] = self._grid([n for n in holders if n.ordinal in self.ok])
        return grid

    def copy(self, spreads: Collection[str] | None = None) -> Eligible:
        """Only these models' spreads, where named: the rest are built again
        on their next decision."""
        other = Eligible.__new__(Eligible)
        other.gpu_class, other.ok, other.ordered = self.gpu_class, self.ok, self.ordered
        other.grid = self.grid.copy()
        other.holders = {m: g.copy() for m, g in self.holders.items()}
        other.spread = {
            m: s.copy() for m, s in self.spread.items() if spreads is None or m in spreads
        }
        return other


def build_spread(
    e: Eligible,
    model: str,
    nodes: list[NodeState],
    replicas: Replicas,
    groups: Groups,
    near: Iterable[int],
) -> Spread:
    """The model's spread for one kind of profile: the kind's grid split by
    group, then the nodes near the model (its replicas' and its weights')
    filed at their own tiers. Most nodes run none of a model's replicas."""
    assert e.gpu_class is not None
    spread = e.spread[model] = Spread(groups.first)
    counts = replicas.in_domain.get(model)
    base: dict[int, Grid] = {}
    if len(groups.weighted) == 1:
        # A fleet naming no domains (or one of each) is one group.
        base[0] = e.grid.copy()
    else:
        # Each group's rows as wide as the kind's: a node moving to a shape
        # some node of the kind has finds its cell there.
        widths = [len(row) for row in e.grid.cells]
        of = groups.of
        split: dict[int, list[list[list[int]]]] = {}
        for count, row in enumerate(e.grid.cells):
            for island, cell in enumerate(row):
                for o in cell:
                    cells = split.get(of[o])
                    if cells is None:
                        cells = split[of[o]] = [[[] for _ in range(k)] for k in widths]
                    cells[count][island].append(o)
        for g, cells in split.items():
            grid = base[g] = Grid()
            grid.cells, grid.sizes = cells, [sum(map(len, row)) for row in cells]
            while grid.sizes and not grid.sizes[-1]:
                grid.sizes.pop()
                cells.pop()
    for g, grid in base.items():
        if grid.sizes:
            key = (g, 0, True)
            spread.grids[key], spread.keys[g] = grid, (key,)
            spread.scores[key] = score = groups.base(g, counts)
            spread.order.append((0, score, True, g))
            spread.owned.add(key)
    spread.order.sort()
    for o in near:
        if o in e.ok:
            n = nodes[o]
            key = key_of(groups, replicas, n, model)
            if key[1:] != (0, True):
                shape = n.gpu_shape(e.gpu_class)
                spread.remove((key[0], 0, True), o, shape)
                spread.file(key, o, shape, groups, counts)
    return spread


def spread_applied(
    e: Eligible,
    model: str,
    n: NodeState,
    was: int,
    shapes: tuple[tuple[int, int], tuple[int, int]],
    replicas: Replicas,
    groups: Groups,
) -> None:
    """One more of the model's replicas on the node (it had `was`), its free
    GPUs of the kind's class from one shape to the other: the spreads again."""
    o = n.ordinal
    old, new = shapes
    inside = o in e.ok
    g = groups.of[o]
    holds = n.view.holds_weights
    on_node = replicas.on_node
    moved = inside and new != old
    # Where a model neither runs on the node nor has its weights there.
    plain = (g, 0, True)
    for m, spread in e.spread.items():
        if m == model:
            counts = replicas.in_domain.get(model)
            if inside:
                lacks = model not in holds
                spread.remove((g, was, lacks), o, old)
                spread.file((g, was + 1, lacks), o, new, groups, counts)
            # The domains' counts went up for their nodes this kind may use,
            # whether or not it may use this one.
            spread.rescore(groups.related[g], groups, counts)
        elif moved:
            mine = on_node.get(m)
            mine_here = mine.get(o, 0) if mine else 0
            key = (g, mine_here, m not in holds) if mine_here or holds else plain
            grid = spread.grids[key] if key in spread.owned else spread.grid(key)
            grid.move(o, old, new)
