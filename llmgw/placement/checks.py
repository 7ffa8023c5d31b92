"""One node's free state and the rules that refuse it, with their messages.

Every message names what bit with both numbers: "needs 15" beside a 31 GiB
machine reads as a scheduler bug, "has 16.0 GiB unclaimed, needs 20.0 GiB"
reads as a full node. Sizes print in binary units with their names, as
`ctl nodes` prints them, with as many digits as it takes for two different
figures to read differently.

An Inventory that has had decisions applied (a dry run: headroom, a scale
check) judges the state after them; what those decisions took is told apart
from what the node really has allocated, since nothing of it exists yet.
"""

from __future__ import annotations

from functools import lru_cache

from llmgw.locations import label as level_label
from llmgw.units import format_bytes_pair

from . import power
from .types import READY, SPREAD_LEVELS, NodeView, Profile, Reason, in_use

Refusal = tuple[Reason, str]

DRY_RUN = "by the replicas this dry run placed before this one"

# Explaining a refusal formats a few figures per node, and a fleet repeats
# the same few totals and claims: formatting was the largest single cost.
sizes = lru_cache(maxsize=4096)(format_bytes_pair)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


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
        self.power: list[power.DomainPower] = []
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


def static_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """Rules that applying decisions cannot change; cached per profile."""
    v = n.view
    if v.state != READY:
        return Reason.NOT_READY, f"{v.name} is {v.state}, needs {READY}"
    if v.cordoned:
        return Reason.CORDONED, f"{v.name} is cordoned: {v.cordon_reason or 'no reason given'}"
    if v.held:
        return Reason.HELD, f"{v.name} is in held {v.held}, needs a domain that is not held"
    for key, want in p.node_selector.items():
        have = v.labels.get(key)
        if have != want:
            has = f"has {key}={have!r}" if have is not None else f"has no label {key}"
            return Reason.SELECTOR, f"{v.name} {has}, needs {key}={want!r}"
    refusal = engine_refusal(n, p)
    if refusal is not None:
        return refusal
    if p.min_memory_gb and v.memory_total_bytes is not None:
        if v.memory_total_bytes < p.min_memory_bytes:
            return (
                Reason.MEMORY_TOTAL,
                "{} has {} of memory, needs {}".format(
                    v.name, *sizes(v.memory_total_bytes, p.min_memory_bytes)
                ),
            )
    if p.gpu_class is not None and p.gpu_class not in n.class_total:
        has = ", ".join(f"{c} {k}" for k, c in sorted(n.class_total.items())) or "no GPUs"
        return (
            Reason.GPU_CLASS,
            f"{v.name} has 0 {p.gpu_class} GPUs ({has}), needs {p.gpus_per_shard}",
        )
    return None


def engine_refusal(n: NodeState, p: Profile) -> Refusal | None:
    v = n.view
    # An agent too old to probe says nothing about engines; refusing it would
    # empty the fleet on a control plane upgrade.
    if not v.engines_probed:
        return None
    versions = n.engine_versions.get(p.engine)
    # An engine reported without a version (named in agent.yaml on purpose)
    # is of unknown version, which is not a wrong one.
    wanted = p.engine if p.engine_version is None else f"{p.engine}@{p.engine_version}"
    if versions is not None and (
        p.engine_version is None or None in versions or p.engine_version in versions
    ):
        return None
    has = f"has engines {engine_list(n)}" if v.engines else "has no engines"
    said = v.engine_status.get(p.engine, "")
    status = f" ({said})" if said else ""
    return Reason.ENGINE, f"{v.name} {has}, needs {wanted}{status}"


def engine_list(n: NodeState) -> str:
    """Each engine once: "llama.cpp@b11434", not also the bare name the
    snapshot adds beside it; a bare name only when no version is known."""
    names: list[str] = []
    for name, versions in sorted(n.engine_versions.items()):
        known = sorted(v for v in versions if v is not None)
        if known:
            names.extend(f"{name}@{v}" for v in known)
        else:
            names.append(name)
    return ", ".join(names)


def split(real: str, planned: str, real_n: int, planned_n: int) -> str:
    """What of a node's claims its shards hold and what a dry run's earlier
    decisions took; "" when the dry run took nothing here."""
    if not planned_n:
        return ""
    if not real_n:
        return f" {DRY_RUN}"
    return f": {real} already, {planned} {DRY_RUN}"


def memory_refusal(n: NodeState, p: Profile) -> Refusal | None:
    want = p.memory_bytes
    # Zero is nobody said and claims nothing; None free is an unreported total.
    if want and n.free_mem is not None and n.free_mem < want:
        v = n.view
        text = memory_text(v.memory_total_bytes or 0, n.free_mem, v.claimed_memory_bytes, want)
        return Reason.MEMORY_CLAIMED, f"{v.name} {text}"
    return None


# A fleet repeats a few totals, claims and wants: a refusal of every node
# formats each combination once.
@lru_cache(maxsize=4096)
def memory_text(total: int, free_mem: int, real: int, want: int) -> str:
    claimed = total - free_mem
    free, needs = sizes(max(free_mem, 0), want)
    if not claimed:
        return f"has {free} of memory, none of it claimed, needs {needs}"
    planned = claimed - real
    of, less = sizes(total, claimed)
    return (
        f"has {free} of memory unclaimed ({of} less {less} claimed"
        f"{split(*sizes(real, planned), real, planned)}), needs {needs}"
    )


def cores_refusal(n: NodeState, p: Profile) -> Refusal | None:
    want = p.cpu_cores
    if want and n.free_cores is not None and n.free_cores < want:
        v = n.view
        cpus = v.cpus or 0
        reserved = cpus - n.free_cores
        if not reserved:
            return (
                Reason.CORES,
                f"{v.name} has {plural(cpus, 'CPU core')}, none reserved, needs {want}",
            )
        real, planned = v.claimed_cores, reserved - v.claimed_cores
        return (
            Reason.CORES,
            f"{v.name} has {plural(max(n.free_cores, 0), 'CPU core')} unreserved "
            f"({cpus} less {reserved} reserved{split(str(real), str(planned), real, planned)}), "
            f"needs {want}",
        )
    return None


def pick_gpus(n: NodeState, p: Profile) -> tuple[int, ...] | None:
    """The GPU indices one shard gets on this node, or None if it cannot."""
    gps = p.gpus_per_shard
    if gps == 0:
        return ()
    assert p.gpu_class is not None
    free = n.free.get(p.gpu_class)
    if not free or len(free) < gps:
        return None
    group = min(p.tensor_parallel, gps)
    if group == 1 or not n.islands:
        return tuple(free[:gps])
    # Each tensor-parallel group goes whole into one island, the tightest that
    # takes it, so the larger islands stay whole for larger groups.
    avail = [[i for i in free if i in island] for island in n.islands]
    chosen: list[int] = []
    remaining = gps
    while remaining:
        need = min(group, remaining)
        best: list[int] | None = None
        for a in avail:
            if len(a) >= need and (
                best is None or len(a) < len(best) or (len(a) == len(best) and a[0] < best[0])
            ):
                best = a
        if best is None:
            return None
        chosen.extend(best[:need])
        del best[:need]
        remaining -= need
    return tuple(sorted(chosen))


def gpu_refusal(n: NodeState, p: Profile) -> Refusal:
    """Why pick_gpus returned None, with the numbers."""
    v = n.view
    cls = p.gpu_class
    assert cls is not None
    free = n.free.get(cls, [])
    total = n.class_total.get(cls, 0)
    if len(free) >= p.gpus_per_shard:
        group = min(p.tensor_parallel, p.gpus_per_shard)
        largest = max((sum(1 for i in free if i in isl) for isl in n.islands), default=0)
        return (
            Reason.NVLINK,
            f"{v.name} has {len(free)} free {cls} GPUs but its largest free NVLink island "
            f"has {largest}, a tensor-parallel group needs {group} together",
        )
    sick = [g for g in v.gpus if g.gpu_class == cls and not g.healthy]
    real = sum(1 for g in v.gpus if g.gpu_class == cls and g.healthy and g.allocated)
    # The rest of the missing cards went to decisions applied to this copy.
    planned = total - len(sick) - len(free) - real
    parts = [f"{real} allocated"] if real else []
    if planned:
        parts.append(f"{planned} taken {DRY_RUN}")
    if sick:
        why = "; ".join(f"GPU {g.index}: {g.unhealthy_reason or 'unhealthy'}" for g in sick)
        parts.append(f"{len(sick)} unhealthy ({why})")
    detail = f" ({', '.join(parts)})" if parts else ""
    return (
        Reason.GPUS_FREE,
        f"{v.name} has {len(free)} free {cls} GPUs of {total}{detail}, needs {p.gpus_per_shard}",
    )


def dynamic_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """The rules that applying decisions changes."""
    refusal = memory_refusal(n, p) or cores_refusal(n, p)
    if refusal is not None:
        return refusal
    gpus = pick_gpus(n, p)
    if gpus is None:
        return gpu_refusal(n, p)
    return power.refusal(n, p, gpus) if n.power else None


def shard_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """Every per-node rule, in the order an operator would fix them."""
    return static_refusal(n, p) or dynamic_refusal(n, p)


def fabric_adapters(n: NodeState, fabric: str) -> tuple[str, ...]:
    return tuple(n.view.fabrics.get(fabric, ()))
