"""One node's free state and the rules that refuse it, with their messages.

Every message names what bit with both numbers: "needs 15" beside a 31 GB
machine reads as a scheduler bug, "has 16 GB unclaimed, needs 20" reads as a
full node.
"""

from __future__ import annotations

from functools import lru_cache

from .types import GB, READY, NodeView, Profile, Reason

Refusal = tuple[Reason, str]


# Explaining a refusal formats a few figures per node, and a fleet repeats
# the same few totals and claims: formatting was the largest single cost.
@lru_cache(maxsize=4096)
def gb(n: int | float) -> str:
    value = n / GB
    text = f"{value:.1f}".removesuffix(".0")
    return f"{text} GB"


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
    )

    def __init__(self, ordinal: int, view: NodeView) -> None:
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
        self.used = (
            view.claimed_memory_bytes > 0
            or view.claimed_cores > 0
            or any(g.allocated for g in view.gpus)
        )
        islands: list[frozenset[int]] = []
        if view.nvlink_islands:
            covered: set[int] = set()
            for island in view.nvlink_islands:
                islands.append(frozenset(island))
                covered |= island
            # A card the topology does not mention has no NVLink peer: it stands alone.
            islands.extend(frozenset({g.index}) for g in view.gpus if g.index not in covered)
        self.islands = tuple(islands)
        versions: dict[str, set[str | None]] = {}
        for e in view.engines:
            name, _, version = e.partition("@")
            versions.setdefault(name, set()).add(version or None)
        self.engine_versions = versions

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
        return max(sum(1 for i in free if i in island) for island in self.islands)


def static_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """Rules that applying decisions cannot change; cached per profile."""
    v = n.view
    if v.state != READY:
        return Reason.NOT_READY, f"{v.name} is {v.state}, needs {READY}"
    if v.cordoned:
        return Reason.CORDONED, f"{v.name} is cordoned: {v.cordon_reason or 'no reason given'}"
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
                f"{v.name} has {gb(v.memory_total_bytes)} of memory, needs {gb(p.min_memory_bytes)}",
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
    has = f"has engines {', '.join(sorted(v.engines))}" if v.engines else "has no engines"
    status = f" ({v.engine_status})" if v.engine_status else ""
    return Reason.ENGINE, f"{v.name} {has}, needs {wanted}{status}"


def memory_refusal(n: NodeState, p: Profile) -> Refusal | None:
    want = p.memory_bytes
    # Zero is nobody said and claims nothing; None free is an unreported total.
    if want and n.free_mem is not None and n.free_mem < want:
        v = n.view
        total = v.memory_total_bytes or 0
        return (
            Reason.MEMORY_CLAIMED,
            f"{v.name} has {gb(max(n.free_mem, 0))} of memory unclaimed "
            f"({gb(total)} less {gb(total - n.free_mem)} claimed), needs {gb(want)}",
        )
    return None


def cores_refusal(n: NodeState, p: Profile) -> Refusal | None:
    want = p.cpu_cores
    if want and n.free_cores is not None and n.free_cores < want:
        v = n.view
        cpus = v.cpus or 0
        return (
            Reason.CORES,
            f"{v.name} has {plural(max(n.free_cores, 0), 'CPU core')} unreserved "
            f"({cpus} less {cpus - n.free_cores} reserved), needs {want}",
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
    allocated = total - len(sick) - len(free)
    detail = f"{allocated} allocated"
    if sick:
        why = "; ".join(f"GPU {g.index}: {g.unhealthy_reason or 'unhealthy'}" for g in sick)
        detail += f", {len(sick)} unhealthy ({why})"
    return (
        Reason.GPUS_FREE,
        f"{v.name} has {len(free)} free {cls} GPUs of {total} ({detail}), needs {p.gpus_per_shard}",
    )


def dynamic_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """The rules that applying decisions changes."""
    return (
        memory_refusal(n, p)
        or cores_refusal(n, p)
        or (gpu_refusal(n, p) if pick_gpus(n, p) is None else None)
    )


def shard_refusal(n: NodeState, p: Profile) -> Refusal | None:
    """Every per-node rule, in the order an operator would fix them."""
    return static_refusal(n, p) or dynamic_refusal(n, p)


def fabric_adapters(n: NodeState, fabric: str) -> tuple[str, ...]:
    return tuple(n.view.fabrics.get(fabric, ()))
