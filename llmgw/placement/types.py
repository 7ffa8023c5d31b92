"""Plain data the scheduler reads and writes.

Nothing here touches the ORM or the network: the placement service turns a
snapshot of the inventory into these views, so the scheduler can be
property-tested, benchmarked and dry-run on a copy of the fleet.

Units: memory is in bytes on nodes and in GiB (2**30 bytes) on profiles,
because operators write profiles and agents report bytes. A profile's
`memory_gb` is binary like the memory it is sold as (a "16 GB" DIMM holds
16 GiB), and every message prints sizes in binary units with their names
(llmgw.units), so a figure reads back the same on every surface.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from llmgw.locations import label as level_label
from llmgw.locations import location
from llmgw.units import GiB

READY = "Ready"
# The node label naming its rack: replicas of one model spread over racks too.
RACK = level_label("rack")
# What a model's replicas spread over, largest first: one breaker trip or
# one rack's switch failing must not take every replica with it.
SPREAD_LEVELS = ("room", "row", "rack", "pdu")
# What a multi-node replica may be kept inside (Profile.keep_within).
KEEP_WITHIN = ("rack", "row", "room")


def location_of(labels: Mapping[str, str]) -> str:
    """Where a node sits in the facility tree (llmgw.locations' one spelling)."""
    return location(labels)


@dataclass(frozen=True, slots=True)
class GpuView:
    index: int
    uuid: str
    gpu_class: str
    memory_bytes: int | None = None
    healthy: bool = True
    # The agent's words for why (an ECC fault, a foreign process); shown in refusals.
    unhealthy_reason: str = ""
    allocated: bool = False
    # The card's enforced power limit (NVML), watts; None = not reported.
    power_limit_w: float | None = None


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    state: str = READY
    cordoned: bool = False
    cordon_reason: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    # None means the agent did not say (an old agent), never "has none".
    cpus: int | None = None
    memory_total_bytes: int | None = None
    # What the node's existing allocations declared, not what they measure.
    claimed_memory_bytes: int = 0
    claimed_cores: int = 0
    # Model name -> the shards of it the node already runs, whatever they
    # claim (see in_use). One per replica, as a replica's shards are on
    # different nodes: replicas of one model spread by it.
    models: Mapping[str, int] = field(default_factory=dict)
    gpus: tuple[GpuView, ...] = ()
    # Declared fabric name -> this node's adapters on it (mlx5_0, ...).
    fabrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Sets of GPU indices joined by NVLink inside the node; empty = unknown.
    nvlink_islands: tuple[frozenset[int], ...] = ()
    # Models whose weights the node can already see (local or shared).
    holds_weights: frozenset[str] = frozenset()
    # Installed engines: "llama.cpp" (version unknown) or "llama.cpp@b11434".
    engines: frozenset[str] = frozenset()
    # False for an agent too old to report engines: it is not refused for them.
    engines_probed: bool = False
    # Engine name -> the agent's own words while it converges on it, e.g.
    # {"llama.cpp": "installing: downloading ..."}: a refusal for one engine
    # quotes that engine's words, never another's.
    engine_status: Mapping[str, str] = field(default_factory=dict)
    # Multi-node NVLink domain (ClusterUUID/clique). The inventory sets it only
    # when every card is joined and IMEX is up; otherwise None.
    nvlink_domain: str | None = None
    # Why a node whose cards name a domain is kept out of it ("GPU 2: fabric
    # registration completed with status insufficient_resources", "IMEX is down").
    nvlink_problem: str = ""
    # Declared fabric name -> why this node cannot be used on it (its adapters
    # for the name sit on two physical fabrics).
    fabric_problems: Mapping[str, str] = field(default_factory=dict)
    # Fabric name -> leaf switch the node's adapters hang off, where mapped.
    fabric_leaves: Mapping[str, str] = field(default_factory=dict)
    # Fabrics on which a cable of this node trained below its kind's rate.
    degraded_fabrics: frozenset[str] = frozenset()
    # The held facility domain the node is in and why ("rack r01 (PDU
    # maintenance)"); "" when it is in none.
    held: str = ""
    # Watts, None when unknown (never 0): what its shards' profiles declare,
    # its GPUs' enforced limits (derived), and GPU plus CPU package power
    # as last measured.
    declared_w: float | None = None
    derived_w: float | None = None
    measured_w: float | None = None
    # The power-capped domains the node is in: ("rack=r07", cap in watts).
    budgets: tuple[tuple[str, float], ...] = ()

    @property
    def shards(self) -> int:
        """Shards the node already runs, of every model."""
        return sum(self.models.values())


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    priority: int = 0
    # None: a CPU profile, which takes no GPU.
    gpu_class: str | None = None
    gpus_per_shard: int = 0
    tensor_parallel: int = 1
    nodes_per_replica: int = 1
    # Capability filter against the node's total memory; 0 = no requirement.
    min_memory_gb: float = 0
    # Claim against the node's unclaimed memory; 0 = nobody said, claims nothing.
    memory_gb: float = 0
    # Reserved out of the node's CPUs and handed to the engine as its threads.
    cpu_cores: int = 0
    engine: str = "llama.cpp"
    engine_version: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Declared fabric for a multi-node replica; None lets placement pick one.
    fabric: str | None = None
    # Watts one shard draws, as the operator declares it; None = not said.
    power_w: float | None = None
    # A multi-node replica's nodes all in one rack, row or room; None = anywhere.
    keep_within: str | None = None

    def __post_init__(self) -> None:
        if self.gpu_class is None and self.gpus_per_shard:
            raise ValueError(f"profile {self.name}: GPUs per shard without a GPU class")
        if self.gpu_class is not None and self.gpus_per_shard < 1:
            raise ValueError(f"profile {self.name}: a GPU profile needs at least one GPU")
        if self.nodes_per_replica < 1 or self.tensor_parallel < 1:
            raise ValueError(f"profile {self.name}: nodes and tensor parallel start at 1")
        if min(self.min_memory_gb, self.memory_gb, self.cpu_cores) < 0:
            raise ValueError(f"profile {self.name}: memory and cores cannot be negative")
        if self.keep_within is not None and self.keep_within not in KEEP_WITHIN:
            raise ValueError(f"profile {self.name}: keep_within is one of {', '.join(KEEP_WITHIN)}")

    # gib_bytes, inlined: the scheduler reads these once per node it judges.
    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * GiB)

    @property
    def min_memory_bytes(self) -> int:
        return int(self.min_memory_gb * GiB)


def gib_bytes(gib: float) -> int:
    """A catalog figure (GiB) in bytes; the snapshot converts stored claims
    with it too, one shard at a time, so both sides add the same bytes."""
    return int(gib * GiB)


def in_use(v: NodeView) -> bool:
    """Whether the node runs any shard: the one definition of "used".

    A CPU shard is packed onto used nodes so that empty ones stay empty, and
    a shard that declares no memory and no cores still runs there, so what
    counts is the shard, not its size. Claims and allocated cards only come
    from shards; a view that has them but no count is in use all the same.
    """
    return (
        any(v.models.values())
        or v.claimed_memory_bytes > 0
        or v.claimed_cores > 0
        or any(g.allocated for g in v.gpus)
    )


class Reason(StrEnum):
    NOT_READY = "not_ready"
    CORDONED = "cordoned"
    SELECTOR = "node_selector"
    ENGINE = "engine_missing"
    MEMORY_TOTAL = "memory_too_small"
    GPU_CLASS = "no_gpu_of_class"
    MEMORY_CLAIMED = "memory_claimed"
    CORES = "cpu_cores"
    GPUS_FREE = "gpus_free"
    NVLINK = "nvlink_island"
    FABRIC = "no_fabric"
    FABRIC_TOO_SMALL = "fabric_too_small"
    NOT_PREFERRED = "not_preferred"
    NVLINK_DOMAIN = "nvlink_domain"
    HELD = "facility_held"
    POWER_CAP = "power_cap"
    KEEP_WITHIN = "keep_within"

    @property
    def summary(self) -> str:
        return _TITLES[self]


_TITLES = {
    Reason.NOT_READY: "not Ready",
    Reason.CORDONED: "cordoned",
    Reason.SELECTOR: "node selector does not match",
    Reason.ENGINE: "engine not installed",
    Reason.MEMORY_TOTAL: "too little memory",
    Reason.GPU_CLASS: "no GPU of the class",
    # Not "already claimed": a node with nothing on it is refused for this too.
    Reason.MEMORY_CLAIMED: "too little unclaimed memory",
    Reason.CORES: "too few unreserved CPU cores",
    Reason.GPUS_FREE: "too few free GPUs",
    Reason.NVLINK: "tensor-parallel group does not fit an NVLink island",
    Reason.FABRIC: "not on the fabric",
    Reason.FABRIC_TOO_SMALL: "fabric has too few nodes that fit",
    Reason.NOT_PREFERRED: "fits, another node was preferred",
    Reason.NVLINK_DOMAIN: "kept out of its NVLink domain",
    Reason.HELD: "in a held facility domain",
    Reason.POWER_CAP: "would take a facility domain past its power cap",
    Reason.KEEP_WITHIN: "too few nodes that fit within one facility domain",
}


class Code(str):
    """A reason code declared beside its rule (rules.py) rather than in
    Reason: reads as a Reason does (its value, its summary)."""

    summary: str

    def __new__(cls, value: str, summary: str) -> Code:
        code = super().__new__(cls, value)
        code.summary = summary
        return code

    @property
    def value(self) -> str:
        return str(self)


ReasonCode = Reason | Code


@dataclass(frozen=True, slots=True)
class Rejection:
    node: str
    reason_code: ReasonCode
    message: str
    profile: str = ""


@dataclass(frozen=True, slots=True)
class Shard:
    node: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    # Only the replica's fabric's adapters; empty for a single-node replica.
    adapters: tuple[str, ...]
    cpu_cores: int
    memory_bytes: int
    holds_weights: bool
    # Watts the shard adds to its node's draw (declared, else its cards'
    # limits); None when neither is known.
    power_w: float | None = None
    # The node's place in the facility tree (location_of); "" unknown.
    location: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    model: str
    profile: str
    shards: tuple[Shard, ...]
    # "ib-a" for a replica across an InfiniBand/RoCE fabric, "nvlink:<domain>"
    # for one inside a multi-node NVLink domain, None for a single node.
    fabric: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # The leaf switch every node of a multi-node replica hangs off, when they
    # share one (from the fabric's map); None when they do not or it is unmapped.
    leaf: str | None = None
    # Nodes taken although a cable of theirs on the fabric trained short.
    short_cabled: tuple[str, ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(s.node for s in self.shards)

    @property
    def threads(self) -> int | None:
        # The engine's thread count is the reserved cores; None lets it choose.
        cores = self.shards[0].cpu_cores if self.shards else 0
        return cores or None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic collector off while building many acyclic objects.

    Indexing a fleet or explaining a refusal makes tens of thousands of small
    objects and no cycles; left on, the collector walks the whole growing heap
    again and again meanwhile, and at 20,000 nodes that is most of the time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# (profile name, priority, placed) per profile tried, in the order tried.
Attempts = tuple[tuple[str, int, bool], ...]

# Computes one profile's rejections on demand; see Explanation.
RejectionSource = Callable[[], tuple[Rejection, ...]]


@dataclass(slots=True, weakref_slot=True, eq=False)
class Explanation:
    """Why every node was refused, per profile tried, highest priority first.

    Not frozen: building thousands of messages per decision would cost more
    than the decision, so the rejections are computed the first time they are
    read. The scheduler forces that before it changes the inventory they were
    judged against, so a late read still explains the state decided on.
    """

    model: str
    attempts: Attempts
    _sources: list[RejectionSource] = field(repr=False)
    _rejections: tuple[Rejection, ...] | None = field(default=None, repr=False)

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        self.materialize()
        assert self._rejections is not None
        return self._rejections

    def materialize(self) -> None:
        if self._rejections is None:
            with gc_paused():
                self._rejections = tuple(r for source in self._sources for r in source())
            self._sources = []

    def by_reason(self) -> dict[str, dict[ReasonCode, list[Rejection]]]:
        """Profile name -> reason -> rejections, in the order tried."""
        grouped: dict[str, dict[ReasonCode, list[Rejection]]] = {a[0]: {} for a in self.attempts}
        for r in self.rejections:
            grouped.setdefault(r.profile, {}).setdefault(r.reason_code, []).append(r)
        return grouped

    def render(self) -> str:
        lines: list[str] = []
        grouped = self.by_reason()
        for name, priority, placed in self.attempts:
            verdict = "placed" if placed else "does not fit"
            lines.append(f"profile {name} (priority {priority}): {verdict}")
            for reason, rejections in grouped.get(name, {}).items():
                count = f"{len(rejections)} node" + ("" if len(rejections) == 1 else "s")
                lines.append(f"  {reason.summary} ({count}, {reason.value}):")
                lines.extend(f"    {r.message}" for r in rejections)
        if not self.attempts:
            lines.append("no profiles to place")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Placement:
    model: str
    # None when no profile fits; the explanation then says why, node by node.
    decision: Decision | None
    explanation: Explanation
