"""The placement rules, each one object in one table (RULES).

A rule says which profile and node fields it reads (the profile kinds the
index keeps apart are derived from those: static_key), its fast check (the
scheduler asks it of every node it tries), why it refuses a node with its
reason code and the numbers, a message made only when explain asks, and
what a shard reserves of a node when a decision is applied. Static rules
are those applying a decision cannot change: the index judges them once
per kind of profile. The rest are judged node by node as decisions are
applied. Adding a rule is a class here (or in a file of its own) in the
table, with its tests: the index, the fast fit and explain loop over it.

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

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from operator import attrgetter

from . import power
from .node_state import NodeState, Refusal
from .rule_text import DRY_RUN, cores_message, engine_list, memory_message, sizes
from .types import READY, NodeView, Profile, Reason, ReasonCode, Shard

Gpus = tuple[int, ...]
# A rule's fast check, as the scheduler calls it: node, profile, the GPUs
# the shard would take there.
Check = Callable[[NodeState, Profile, Gpus], bool]


class Rule:
    """One placement rule. Subclasses set the fields and override refusal;
    fits and reserve where the rule has a faster test or claims something."""

    code: ReasonCode
    # Applying decisions cannot change its verdict: judged once per kind.
    static = True
    # Its check is the pick of the shard's GPUs the fast fit makes first.
    picks = False
    # Only a fleet with power caps can be refused by it.
    capped = False
    # It reads the GPUs the shard would take (picked once, when first asked).
    needs_gpus = False
    # The profile's and the node view's fields it reads.
    profile_fields: tuple[str, ...] = ()
    node_fields: tuple[str, ...] = ()

    def applies(self, p: Profile) -> bool:
        """Whether it can refuse any node for this profile at all: whether
        the profile sets a field it reads (one left empty asks nothing of
        a node), or always for a rule that reads none."""
        return not self.profile_fields or any(getattr(p, f) for f in self.profile_fields)

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        return self.refusal(n, p, gpus) is None

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        raise NotImplementedError

    def reserve(self, n: NodeState, shard: Shard) -> None:
        """What one shard of a decision applied takes of the node."""

    def holds(self, view: NodeView, shard: Shard, sign: int) -> dict[str, object]:
        """The node view's fields this rule counts once the shard's claim
        is added (sign 1) or taken back (-1): claims.py, the one undo."""
        return {}


class NodeSays(Rule):
    """A rule on the node alone, whatever the profile: the node is refused
    while `refuses` holds of its view, with the words `message` gives."""

    def __init__(
        self,
        code: ReasonCode,
        reads: tuple[str, ...],
        refuses: Callable[[NodeView], object],
        message: Callable[[NodeView], str],
    ) -> None:
        self.code = code
        self.node_fields = reads
        self.refuses = refuses
        self.message = message

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        return not self.refuses(n.view)

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        v = n.view
        if self.refuses(v):
            return self.code, f"{v.name} {self.message(v)}"
        return None


Ready = partial(
    NodeSays,
    Reason.NOT_READY,
    ("state",),
    lambda v: v.state != READY,
    lambda v: f"is {v.state}, needs {READY}",
)
Cordoned = partial(
    NodeSays,
    Reason.CORDONED,
    ("cordoned", "cordon_reason"),
    attrgetter("cordoned"),
    lambda v: f"is cordoned: {v.cordon_reason or 'no reason given'}",
)
Held = partial(
    NodeSays,
    Reason.HELD,
    ("held",),
    attrgetter("held"),
    lambda v: f"is in held {v.held}, needs a domain that is not held",
)


class Selector(Rule):
    code = Reason.SELECTOR
    profile_fields = ("node_selector",)
    node_fields = ("labels",)

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        labels = n.view.labels
        return all(labels.get(key) == want for key, want in p.node_selector.items())

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        v = n.view
        for key, want in p.node_selector.items():
            have = v.labels.get(key)
            if have != want:
                has = f"has {key}={have!r}" if have is not None else f"has no label {key}"
                return self.code, f"{v.name} {has}, needs {key}={want!r}"
        return None


class Engine(Rule):
    code = Reason.ENGINE
    profile_fields = ("engine", "engine_version")
    node_fields = ("engines", "engines_probed", "engine_status")

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        return engine_fits(n, p)

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        return engine_refusal(n, p)


class MemoryTotal(Rule):
    code = Reason.MEMORY_TOTAL
    profile_fields = ("min_memory_gb",)
    node_fields = ("memory_total_bytes",)

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        total = n.view.memory_total_bytes
        return total is None or total >= p.min_memory_bytes

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        v = n.view
        if p.min_memory_gb and v.memory_total_bytes is not None:
            if v.memory_total_bytes < p.min_memory_bytes:
                return (
                    self.code,
                    "{} has {} of memory, needs {}".format(
                        v.name, *sizes(v.memory_total_bytes, p.min_memory_bytes)
                    ),
                )
        return None


class GpuClass(Rule):
    code = Reason.GPU_CLASS
    profile_fields = ("gpu_class",)
    node_fields = ("gpus",)

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        return p.gpu_class is None or p.gpu_class in n.class_total

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        if p.gpu_class is not None and p.gpu_class not in n.class_total:
            has = ", ".join(f"{c} {k}" for k, c in sorted(n.class_total.items())) or "no GPUs"
            return (
                self.code,
                f"{n.view.name} has 0 {p.gpu_class} GPUs ({has}), needs {p.gpus_per_shard}",
            )
        return None


class Counted(Rule):
    """A count the node has free and a shard claims (memory, cores): None
    free is a node that did not report its total, which stays a candidate
    (an old agent is not a small machine); a profile that wants none
    claims nothing and is refused nothing."""

    static = False

    def __init__(
        self,
        code: ReasonCode,
        wants: tuple[str, str],
        reads: tuple[str, ...],
        free: str,
        message: Callable[[NodeState, int, int], str],
        claimed: str,
    ) -> None:
        self.code = code
        # The profile's field an operator writes, and what it wants in units.
        self.profile_fields = (wants[0],)
        self.node_fields = reads
        self.want = attrgetter(wants[1])
        # The NodeState attribute holding what is free; the Shard's claim on
        # it is named as the profile's wanted amount is.
        self.free = free
        self.free_of = attrgetter(free)
        self.claim = attrgetter(wants[1])
        self.message = message
        # The node view's field summing what its shards claim.
        self.claimed = claimed

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        free: int | None = self.free_of(n)
        return free is None or free >= self.want(p)

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        want: int = self.want(p)
        free: int | None = self.free_of(n)
        if want and free is not None and free < want:
            return self.code, f"{n.view.name} {self.message(n, free, want)}"
        return None

    def reserve(self, n: NodeState, shard: Shard) -> None:
        free: int | None = self.free_of(n)
        if free is not None:
            setattr(n, self.free, free - self.claim(shard))

    def holds(self, view: NodeView, shard: Shard, sign: int) -> dict[str, object]:
        was: int = getattr(view, self.claimed)
        amount: int = self.claim(shard)
        return {self.claimed: was + amount if sign > 0 else max(was - amount, 0)}


MemoryClaimed = partial(
    Counted,
    Reason.MEMORY_CLAIMED,
    ("memory_gb", "memory_bytes"),
    ("memory_total_bytes", "claimed_memory_bytes"),
    "free_mem",
    memory_message,
    "claimed_memory_bytes",
)
Cores = partial(
    Counted,
    Reason.CORES,
    ("cpu_cores", "cpu_cores"),
    ("cpus", "claimed_cores"),
    "free_cores",
    cores_message,
    "claimed_cores",
)


class FreeGpus(Rule):
    """Free GPUs of the class, a tensor-parallel group in one NVLink island:
    pick_gpus, which the fast fit asks first, is its check."""

    code = Reason.GPUS_FREE
    static = False
    profile_fields = ("gpu_class", "gpus_per_shard", "tensor_parallel")
    node_fields = ("gpus", "nvlink_islands")

    picks = True
    needs_gpus = True

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        return gpu_refusal(n, p) if gpus is None else None

    def reserve(self, n: NodeState, shard: Shard) -> None:
        for index in shard.gpu_indices:
            # An index is free in its own class's list or nowhere.
            for free in n.free.values():
                at = bisect_left(free, index)
                if at < len(free) and free[at] == index:
                    del free[at]
                    break
            else:
                raise ValueError(f"{shard.node} GPU {index} is not free")

    def holds(self, view: NodeView, shard: Shard, sign: int) -> dict[str, object]:
        taken = set(shard.gpu_indices)
        if not taken:
            return {}
        allocated = sign > 0
        gpus = tuple(replace(g, allocated=allocated) if g.index in taken else g for g in view.gpus)
        return {"gpus": gpus}


class PowerCap(Rule):
    code = Reason.POWER_CAP
    static = False
    capped = True
    needs_gpus = True
    profile_fields = ("power_w",)
    node_fields = ("declared_w", "derived_w", "measured_w", "budgets", "gpus")

    def applies(self, p: Profile) -> bool:
        # Nothing declared, a shard adds its cards' limits.
        return True

    def fits(self, n: NodeState, p: Profile, gpus: Gpus) -> bool:
        # Empty unless the node is in a capped domain.
        return not n.power or power.refusal(n, p, gpus) is None

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        if not n.power or gpus is None:
            return None
        return power.refusal(n, p, gpus)

    def reserve(self, n: NodeState, shard: Shard) -> None:
        if n.power:
            power.apply(n, shard.power_w)

    def holds(self, view: NodeView, shard: Shard, sign: int) -> dict[str, object]:
        watts = shard.power_w if sign > 0 else -(shard.power_w or 0.0)
        return {
            "declared_w": power.claimed(view.declared_w, watts, declared=True),
            "measured_w": power.claimed(view.measured_w, watts, declared=False),
        }


# In the order an operator would fix them; a node is refused for the first.
RULES: list[Rule] = [
    Ready(),
    Cordoned(),
    Held(),
    Selector(),
    Engine(),
    MemoryTotal(),
    GpuClass(),
    MemoryClaimed(),
    Cores(),
    FreeGpus(),
    PowerCap(),
]


def engine_refusal(n: NodeState, p: Profile) -> Refusal | None:
    if engine_fits(n, p):
        return None
    v = n.view
    wanted = p.engine if p.engine_version is None else f"{p.engine}@{p.engine_version}"
    has = f"has engines {engine_list(n)}" if v.engines else "has no engines"
    said = v.engine_status.get(p.engine, "")
    status = f" ({said})" if said else ""
    return Reason.ENGINE, f"{v.name} {has}, needs {wanted}{status}"


def engine_fits(n: NodeState, p: Profile) -> bool:
    # An agent too old to probe says nothing about engines; refusing it would
    # empty the fleet on a control plane upgrade.
    if not n.view.engines_probed:
        return True
    versions = n.engine_versions.get(p.engine)
    # An engine reported without a version (named in agent.yaml on purpose)
    # is of unknown version, which is not a wrong one.
    return versions is not None and (
        p.engine_version is None or None in versions or p.engine_version in versions
    )


# A fleet repeats a few totals, claims and wants: a refusal of every node
# formats each combination once.
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
