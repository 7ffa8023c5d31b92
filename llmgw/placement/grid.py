"""Nodes filed by their free GPUs of one class and their largest free
NVLink island, and best fit over such grids: the index's (index.py) and
each model's spread's (spread.py). Pure, like the scheduler."""

from __future__ import annotations

from bisect import bisect_left, insort

from .node_state import NodeState
from .types import Profile
from .verdicts import Checks, fit

Found = tuple[NodeState, tuple[int, ...]] | None


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

    def best_fit(self, nodes: list[NodeState], p: Profile, checks: Checks) -> Found:
        """The fewest free GPUs that fit, then node order."""
        return best_fit([(0, self)], len(self.sizes), [0], nodes, p, checks)


def best_fit(
    grids: list[tuple[int, Grid]],
    top: int,
    first: list[int],
    nodes: list[NodeState],
    p: Profile,
    checks: Checks,
) -> Found:
    """Best fit over several groups' grids as one (spread.py; one grid is
    Grid.best_fit): the fewest free GPUs that fit, then node order. The
    grids come in group order, and a group holds no node before its first:
    past a fit, the rest hold none earlier."""
    group = min(p.tensor_parallel, p.gpus_per_shard)
    for count in range(p.gpus_per_shard, top):
        found: Found = None
        for g, grid in grids:
            if found is not None and found[0].ordinal < first[g]:
                break
            sizes = grid.sizes
            if count >= len(sizes) or not sizes[count]:
                continue
            for cell in grid.cells[count][group:]:
                for o in cell:
                    if found is not None and o > found[0].ordinal:
                        break
                    n = nodes[o]
                    gpus = fit(n, p, checks)
                    if gpus is not None:
                        found = (n, gpus)
                        break
        if found is not None:
            return found
    return None
