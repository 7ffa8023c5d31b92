"""One node's free state as a copy of the fleet has it, the capped
domains' draw and each model's replicas per node and domain: what the
rules (rules.py) judge and what applying a decision changes.

In a module of its own so that the rules, the power caps, the index and
the spread all read it without importing each other.
"""

from __future__ import annotations

from llmgw.locations import label as level_label

from .types import SPREAD_LEVELS, NodeView, ReasonCode, in_use

# A refusal: its reason and the message that names the numbers.
Refusal = tuple[ReasonCode, str]


class DomainPower:
    """One capped domain: its cap and the sums of its nodes' figures, kept
    up to date as a copy of the fleet has decisions applied."""

    __slots__ = ("key", "cap", "declared", "derived", "measured", "draw", "unknown", "knows")

    def __init__(self, key: str, cap: float) -> None:
        self.key = key
        self.cap = cap
        # Sums over the nodes that know the figure; None while none does.
        self.declared: float | None = None
        self.derived: float | None = None
        self.measured: float | None = None
        # Sum of each node's largest known figure.
        self.draw = 0.0
        # Nodes with no figure at all.
        self.unknown = 0
        # Nodes counted that know each figure (declared, derived, measured)
        # and that know one at all: a node counted out (uncount) leaves a
        # sum no node knows unknown again, as a fresh count has it.
        self.knows = [0, 0, 0, 0]

    def copy(self) -> DomainPower:
        other = DomainPower(self.key, self.cap)
        for slot in ("declared", "derived", "measured", "draw", "unknown"):
            setattr(other, slot, getattr(self, slot))
        other.knows = list(self.knows)
        return other

    def count(self, declared: float | None, derived: float | None, measured: float | None) -> None:
        knows = self.knows
        if declared is not None:
            self.declared = declared if self.declared is None else self.declared + declared
            knows[0] += 1
        if derived is not None:
            self.derived = derived if self.derived is None else self.derived + derived
            knows[1] += 1
        if measured is not None:
            self.measured = measured if self.measured is None else self.measured + measured
            knows[2] += 1
        draw = largest(declared, derived, measured)
        if draw is None:
            self.unknown += 1
        else:
            self.draw += draw
            knows[3] += 1

    def uncount(
        self, declared: float | None, derived: float | None, measured: float | None
    ) -> None:
        """Take one node's figures back out (it is counted again as it now
        is): what a count of every node but it would say, but for the
        rounding of the sums."""
        knows = self.knows
        if declared is not None and self.declared is not None:
            knows[0] -= 1
            self.declared = self.declared - declared if knows[0] else None
        if derived is not None and self.derived is not None:
            knows[1] -= 1
            self.derived = self.derived - derived if knows[1] else None
        if measured is not None and self.measured is not None:
            knows[2] -= 1
            self.measured = self.measured - measured if knows[2] else None
        draw = largest(declared, derived, measured)
        if draw is None:
            self.unknown -= 1
        else:
            knows[3] -= 1
            self.draw = self.draw - draw if knows[3] else 0.0


def largest(*figures: float | None) -> float | None:
    known = [f for f in figures if f is not None]
    return max(known) if known else None


class NodeState:
    """What is left of one node, updated in place as decisions are applied."""

    __slots__ = (
        "ordinal",
        "view",
        "free",
        "free_mem",
        "free_cores",
        "used",
        "has_gpus",
        "islands",
        "class_total",
        "engine_versions",
        "domains",
        "named",
        "weighted",
        "alone",
        "declared_w",
        "measured_w",
        "power",
    )
    engine_versions: dict[str, set[str | None]]
    domains: tuple[tuple[str, str | None], ...]
    named: bool
    weighted: tuple[tuple[int, tuple[str, str]], ...]
    alone: int

    def __init__(self, ordinal: int, view: NodeView, was: NodeState | None = None) -> None:
        """`was`: the node's state before, whose labels the view keeps (a
        what-if releasing replicas renews thousands of states): what they
        alone decide is taken from it rather than worked out again."""
        self.ordinal = ordinal
        self.view = view
        free: dict[str, list[int]] = {}
        total: dict[str, int] = {}
        for g in view.gpus:
            total[g.gpu_class] = total.get(g.gpu_class, 0) + 1
            # A card with an ECC fault or a foreign process is not free in any useful sense.
            if g.healthy and not g.allocated:
                free.setdefault(g.gpu_class, []).append(g.index)
        for indices in free.values():
            indices.sort()
        self.free = free
        self.class_total = total
        self.has_gpus = bool(view.gpus)
        # Unknown stays unknown: an old agent is not a small machine.
        self.free_mem: int | None = (
            None
            if view.memory_total_bytes is None
            else view.memory_total_bytes - view.claimed_memory_bytes
        )
        # A node that reports no CPU count cannot have cores counted against it,
        # so it stays a candidate, as a node reporting no memory does.
        self.free_cores: int | None = None if view.cpus is None else view.cpus - view.claimed_cores
        self.used = in_use(view)
        islands: list[frozenset[int]] = []
        if view.nvlink_islands:
            covered: set[int] = set()
            for island in view.nvlink_islands:
                islands.append(frozenset(island))
                covered |= island
            # A card the topology does not mention has no NVLink peer: it stands alone.
            islands.extend(frozenset({g.index}) for g in view.gpus if g.index not in covered)
        self.islands = tuple(islands)
        if was is not None and was.view.engines is view.engines:
            self.engine_versions = was.engine_versions
        else:
            versions: dict[str, set[str | None]] = {}
            for e in view.engines:
                name, _, version = e.partition("@")
                versions.setdefault(name, set()).add(version or None)
            self.engine_versions = versions
        # Raised by the shards a dry run places here (power.apply).
        self.declared_w = view.declared_w
        self.measured_w = view.measured_w
        # Its capped domains, shared with their other nodes (Inventory builds them).
        self.power: list[DomainPower] = []
        if was is not None and was.view.labels == view.labels:
            self.domains, self.named = was.domains, was.named
            self.weighted, self.alone = was.weighted, was.alone
        else:
            self._locate(view)

    def _locate(self, view: NodeView) -> None:
        # (level, value) per spread level, None where the node names none.
        self.domains = tuple(
            (level, view.labels.get(level_label(level))) for level in SPREAD_LEVELS
        )
        self.named = any(value is not None for _, value in self.domains)
        # The spread score's parts (Replicas.of): each named domain with its
        # level's weight, and the weights of the levels the node itself stands for.
        last = len(self.domains) - 1
        self.weighted = tuple(
            (WEIGHT ** (last - k), (level, value))
            for k, (level, value) in enumerate(self.domains)
            if value is not None
        )
        self.alone = sum(WEIGHT ** (last - k) for k, d in enumerate(self.domains) if d[1] is None)

    def free_count(self, gpu_class: str | None) -> int:
        if gpu_class is None:
            return 0
        free = self.free.get(gpu_class)
        return len(free) if free else 0

    def gpu_shape(self, gpu_class: str) -> tuple[int, int]:
        return self.free_count(gpu_class), self.largest_island(gpu_class)

    def largest_island(self, gpu_class: str) -> int:
        """Free GPUs of the class in the best-provided NVLink island.

        Without topology every free card counts as one island, since then the
        lowest free indices are taken whatever links them.
        """
        free = self.free.get(gpu_class)
        if not free:
            return 0
        if not self.islands:
            return len(free)
        # Counted in C: every placement and release asks it of its node.
        best = 0
        for island in self.islands:
            here = sum(map(island.__contains__, free))
            if here > best:
                best = here
        return best


# A spread score packs the model's replicas in each spread level, largest
# level first, into one number: fewer in the room first, then the row, the
# rack and the PDU. Counts stay far below the weight.
WEIGHT = 1 << 16
UNNAMED = sum(WEIGHT**i for i in range(len(SPREAD_LEVELS)))


class Replicas:
    """Each model's replicas per node and per facility domain, for one copy
    of the fleet.

    Kept here rather than on each node: a node's state is walked whole to
    explain every refusal, and a larger one costs every explanation more.
    """

    __slots__ = ("on_node", "in_domain")

    def __init__(self) -> None:
        # Model -> node ordinal -> its replicas there; a node with none is absent.
        self.on_node: dict[str, dict[int, int]] = {}
        # Model -> (level, value) -> its replicas there.
        self.in_domain: dict[str, dict[tuple[str, str], int]] = {}

    def levels(self, n: NodeState, model: str) -> list[tuple[str, str | None, int]]:
        """(level, the node's value, the model's replicas there) per spread
        level. A node that names no value for a level counts as a domain of
        its own, so a fleet without labels spreads over nodes alone."""
        nodes = self.on_node.get(model)
        mine = nodes.get(n.ordinal, 0) if nodes else 0
        counts = self.in_domain.get(model)
        out: list[tuple[str, str | None, int]] = []
        for level, value in n.domains:
            if value is None:
                out.append((level, None, mine))
            else:
                out.append((level, value, counts.get((level, value), 0) if counts else 0))
        return out

    def of(self, n: NodeState, model: str) -> tuple[int, int]:
        """The model's replicas on the node, then its spread score: fewer first."""
        nodes = self.on_node.get(model)
        mine = nodes.get(n.ordinal, 0) if nodes else 0
        if not n.named:  # most fleets name no domain: each level is the node itself
            return mine, mine * UNNAMED
        counts = self.in_domain.get(model)
        score = mine * n.alone
        if counts:
            get = counts.get
            for weight, domain in n.weighted:
                score += weight * get(domain, 0)
        return mine, score

    def add(self, model: str, n: NodeState, count: int = 1) -> None:
        nodes = self.on_node.setdefault(model, {})
        nodes[n.ordinal] = nodes.get(n.ordinal, 0) + count
        if not n.named:
            return
        counts: dict[tuple[str, str], int] | None = None
        for level, value in n.domains:
            if value is not None:
                if counts is None:
                    counts = self.in_domain.setdefault(model, {})
                counts[(level, value)] = counts.get((level, value), 0) + count

    def copy(self) -> Replicas:
        other = Replicas()
        other.on_node = {m: dict(c) for m, c in self.on_node.items()}
        other.in_domain = {m: dict(c) for m, c in self.in_domain.items()}
        return other
