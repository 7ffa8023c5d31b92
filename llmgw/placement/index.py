"""The scheduler's index of the fleet: free GPUs bucketed by count and
NVLink island, per kind of profile, per model's weights and per model's
spread, so a decision costs a few bucket lookups instead of a pass over
every node. Pure, like the scheduler that keeps it up to date."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection
from typing import TYPE_CHECKING

from . import power
from .checks import NodeState, pick_gpus
from .types import Profile

if TYPE_CHECKING:
    from .spread import Spread

StaticKey = tuple[object, ...]


def static_key(p: Profile) -> StaticKey:
    # Everything static_refusal reads; profiles that share it share an index.
    return (
        p.gpu_class,
        p.min_memory_bytes,
        p.engine,
        p.engine_version,
        tuple(sorted(p.node_selector.items())),
    )


class Grid:
    """Nodes by (free GPUs of a class, free GPUs in the largest NVLink island).

    Best fit walks the first upwards and skips nodes whose islands are too
    broken up for the tensor-parallel group, which on a half-full fleet would
    otherwise be most of it. Each cell is sorted, so ties go in node order.
    Each row keeps a count of its nodes and empty rows on top are dropped, so
    a walk passes what is empty without looking in it: most of one model's
    tiers (spread.py) hold no node with many GPUs free.
    """

    __slots__ = ("cells", "sizes")

    def __init__(self) -> None:
        self.cells: list[list[list[int]]] = []
        self.sizes: list[int] = []

    def copy(self) -> Grid:
        other = Grid()
        other.cells = [list(map(list, row)) for row in self.cells]
        other.sizes = list(self.sizes)
        return other

    def cell(self, count: int, island: int) -> list[int]:
        while len(self.cells) <= count:
            self.cells.append([])
            self.sizes.append(0)
        row = self.cells[count]
        while len(row) <= island:
            row.append([])
        return row[island]

    def move(self, ordinal: int, old: tuple[int, int], new: tuple[int, int]) -> None:
        """remove then add, in one call: every placement moves its node in
        the grids of each kind and spread that holds it."""
        cells, sizes = self.cells, self.sizes
        cell = cells[old[0]][old[1]]
        del cell[bisect_left(cell, ordinal)]
        sizes[old[0]] -= 1
        count, island = new
        if count < len(cells) and island < len(cells[count]):
            insort(cells[count][island], ordinal)
        else:
            insort(self.cell(count, island), ordinal)
        sizes[count] += 1
        while sizes and not sizes[-1]:
            sizes.pop()
            cells.pop()

    def remove(self, ordinal: int, shape: tuple[int, int]) -> None:
        cell = self.cells[shape[0]][shape[1]]
        del cell[bisect_left(cell, ordinal)]
        sizes = self.sizes
        sizes[shape[0]] -= 1
        # No empty rows on top: a walk for more GPUs than any node has free
        # ends before it starts.
        while sizes and not sizes[-1]:
            sizes.pop()
            self.cells.pop()

    def add(self, ordinal: int, shape: tuple[int, int]) -> None:
        count, island = shape
        cells = self.cells
        # Tested rather than caught: a small grid (one group's, spread.py)
        # often grows a row it trimmed, and a raised IndexError costs more
        # than the insort.
        if count < len(cells) and island < len(cells[count]):
            insort(cells[count][island], ordinal)
        else:
            insort(self.cell(count, island), ordinal)
        self.sizes[count] += 1

    def best_fit(
        self, nodes: list[NodeState], p: Profile, mem: int
    ) -> tuple[NodeState, tuple[int, ...]] | None:
        group = min(p.tensor_parallel, p.gpus_per_shard)
        sizes = self.sizes
        for count in range(p.gpus_per_shard, len(sizes)):
            if not sizes[count]:
                continue
            row = self.cells[count]
            # The first fit in node order among this count's island cells.
            found: tuple[NodeState, tuple[int, ...]] | None = None
            for cell in row[group:]:
                for o in cell:
                    if found is not None and o > found[0].ordinal:
                        break
                    n = nodes[o]
                    gpus = fit(n, p, mem)
                    if gpus is not None:
                        found = (n, gpus)
                        break
            if found is not None:
                return found
        return None


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


def fit(n: NodeState, p: Profile, mem: int) -> tuple[int, ...] | None:
    if mem and n.free_mem is not None and n.free_mem < mem:
        return None
    cores = p.cpu_cores
    if cores and n.free_cores is not None and n.free_cores < cores:
        return None
    gpus = pick_gpus(n, p)
    # Empty unless the node is in a capped domain: the fleet without budgets pays one test.
    if gpus is not None and n.power and power.refusal(n, p, gpus) is not None:
        return None
    return gpus
