"""Fat trees of InfiniBand switches and hosts' adapters, and how they are cabled.

The one model of a made-up fabric. The simulator's fabrics are built from it
(llmgw/simulator/fabrics.py) and answer map requests with its
``ibnetdiscover`` text (:mod:`llmgw.simulator.ibnetdiscover_dump`); the
tests run the real OFED tools on ibsim with its topology file
(:mod:`llmgw.simulator.ibsim_net`); the tests and the benchmark parse trees of
it far larger than ibsim can hold (2,048 nodes, 256 switches).

:func:`cabling` says which port goes to which, once, so every rendering of a
tree shows the same cables: rail r of host h on leaf (r, h // hosts_per_leaf),
adapters on a leaf's ports from 1 in host order, every leaf cabled to every
spine, every spine to every core.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

# a switch's GUID: the tree's switch_guid + its tier's offset + its index in the tier
LEAF_GUIDS, SPINE_GUIDS, CORE_GUIDS = 0x100, 0x1000, 0x2000


@dataclass(frozen=True)
class Host:
    name: str
    adapters: int
    #: the node GUID of mlx5_0; mlx5_N is guid + N (port GUID = node GUID, as on ConnectX-7)
    guid: int

    def adapter_guid(self, rail: int) -> int:
        return self.guid + rail


def numbered_hosts(
    adapters: Sequence[int],
    guid: int = 0xE09D730300000000,
    name: str = "node{:05d}",
    first: int = 0,
) -> tuple[Host, ...]:
    """Hosts ``name.format(first)``, ``name.format(first + 1)``, ... with these
    many adapters each; 0x100 GUIDs apart, room for 256 rails."""
    return tuple(Host(name.format(first + i), n, guid + i * 0x100) for i, n in enumerate(adapters))


@dataclass(frozen=True)
class SwitchNames:
    """Switch descriptions, as format strings of ``fabric``, ``rail``,
    ``group`` (leaves) and ``n`` (spines and cores, from 1)."""

    leaf: str = "{fabric}-leaf-r{rail}-g{group}"
    spine: str = "{fabric}-spine-{n:02d}"
    core: str = "{fabric}-core-{n:02d}"


@dataclass(frozen=True)
class FatTree:
    """A fat tree: rail r of host h on leaf (r, h // hosts_per_leaf), every
    leaf cabled ``uplinks`` times to every spine, every spine to every core.

    ``rail_optimised=False`` cables all of a host's adapters to one leaf per
    host group instead, the shape of a fabric that is not rail-optimised.
    """

    name: str
    hosts: tuple[Host, ...]
    hosts_per_leaf: int
    spines: int
    cores: int = 0
    rate: str = "4xNDR"
    switch_guid: int = 0xFC6A1C0300000000
    #: the switches' radix: a leaf's lower half faces the adapters, its upper half the spines
    switch_ports: int = 64
    #: leaf ports kept for adapters (None: half the radix); uplinks start after
    #: them, or after the last adapter when more are cabled
    leaf_down_ports: int | None = None
    uplinks: int = 1
    rail_optimised: bool = True
    names: SwitchNames = SwitchNames()
    #: ("adapter", host, "mlx5_N") or ("uplink", leaf index, spine) -> e.g. "2xNDR";
    #: with several uplinks to a spine, the first of them
    short: Mapping[tuple[str, str | int, str | int], str] = field(default_factory=dict)
    #: (host, "mlx5_N") -> the rail whose leaf (of the same group) it is plugged into
    miswired: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: spine index -> the rate its cables (up and down) are built for, where it
    #: differs from ``rate``: a fabric midway through a spine upgrade
    spine_rates: Mapping[int, str] = field(default_factory=dict)
    #: (host, "mlx5_N") -> the node description the adapter reports instead of
    #: "host mlx5_N" ("dgx-a12 HCA-1", "localhost mlx5_0", "HCA-3"); ibsim only
    descriptions: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: hosts on one more leaf, after the rails' and cabled up like them: a
    #: storage or management leaf; every adapter of these hosts is on it
    storage_hosts: tuple[Host, ...] = ()
    storage_leaf: str = "storage01"
    #: (leaf index, leaf index): a cable between two leaves, on ports after the
    #: uplinks; the miscabling a fat tree must not have
    leaf_links: tuple[tuple[int, int], ...] = ()
    #: (leaf index, spine): the first cable between them is not there (its
    #: ports are down)
    pulled_uplinks: frozenset[tuple[int, int]] = frozenset()

    @property
    def rails(self) -> int:
        return max((h.adapters for h in self.hosts), default=0)

    @property
    def groups(self) -> int:
        return (len(self.hosts) + self.hosts_per_leaf - 1) // self.hosts_per_leaf

    def leaves(self) -> list[tuple[int, int]]:
        """(rail, group) of each leaf; the storage leaf, if any, is (-1, 0)."""
        rails = self.rails if self.rail_optimised else 1
        storage = [(-1, 0)] if self.storage_hosts else []
        return [(r, g) for r in range(rails) for g in range(self.groups)] + storage

    def leaf_name(self, leaf: tuple[int, int]) -> str:
        if leaf[0] < 0:
            return self.storage_leaf
        return self.names.leaf.format(fabric=self.name, rail=leaf[0], group=leaf[1])

    def leaf_of(self, host_index: int, device: str) -> tuple[int, int]:
        group = host_index // self.hosts_per_leaf
        if not self.rail_optimised:
            return (0, group)
        host = self.hosts[host_index]
        return (self.miswired.get((host.name, device), int(device.rsplit("_", 1)[1])), group)

    def switch_count(self) -> int:
        return len(self.leaves()) + self.spines + self.cores

    def lid_of(self, host: str, device: str) -> int:
        """The LID the subnet manager gave an adapter: switches first, then
        adapters in host order (what :func:`cabling` numbers)."""
        ordinal = self.switch_count()
        for h in self.hosts:
            for r in range(h.adapters):
                ordinal += 1
                if (h.name, f"mlx5_{r}") == (host, device):
                    return ordinal
        raise KeyError(f"{host} {device}")

    def rate_of(self, host: str, device: str) -> str:
        return self.short.get(("adapter", host, device), self.rate)

    def uplink_rate(self, leaf_index: int, spine: int) -> str:
        return self.short.get(("uplink", leaf_index, spine), self.spine_rate(spine))

    def spine_rate(self, spine: int) -> str:
        return self.spine_rates.get(spine, self.rate)


class Switch(NamedTuple):
    guid: int
    name: str
    tier: str  # leaf, spine, core
    nports: int
    lid: int


class Adapter(NamedTuple):
    host: str
    device: str
    guid: int
    lid: int

    @property
    def name(self) -> str:
        return f"{self.host} {self.device}"


class End(NamedTuple):
    guid: int
    port: int


class Cable(NamedTuple):
    a: End  # the end nearer the adapters: adapter-leaf, leaf-spine, spine-core
    b: End
    rate: str


@dataclass(frozen=True)
class Cabling:
    #: leaves, spines, cores, numbered (LIDs) in that order
    switches: list[Switch]
    #: in host order, LIDs after the switches'
    adapters: list[Adapter]
    cables: list[Cable]

    def names(self) -> dict[int, str]:
        out = {s.guid: s.name for s in self.switches}
        out.update((a.guid, a.name) for a in self.adapters)
        return out

    def ports(self, pulled: Collection[int] = ()) -> dict[int, list[tuple[int, End, str]]]:
        """Each node's cabled ports in order, (port, the peer's end, rate),
        leaving out the cables of the ``pulled`` adapters."""
        ports: dict[int, list[tuple[int, End, str]]] = {s.guid: [] for s in self.switches}
        ports.update((a.guid, []) for a in self.adapters)
        for cable in self.cables:
            if cable.a.guid in pulled:
                continue
            ports[cable.a.guid].append((cable.a.port, cable.b, cable.rate))
            ports[cable.b.guid].append((cable.b.port, cable.a, cable.rate))
        for lst in ports.values():
            lst.sort()
        return ports


def cabling(tree: FatTree) -> Cabling:
    """Every switch, adapter and cable of ``tree``, ports numbered."""
    leaves = tree.leaves()
    adapters, cables, down_used = _adapter_cables(tree, leaves)
    reserved = tree.switch_ports // 2 if tree.leaf_down_ports is None else tree.leaf_down_ports
    uplink0 = max(down_used, reserved) + 1
    extra = [0] * len(leaves)
    for pair in tree.leaf_links:
        for li in pair:
            extra[li] += 1
    switches = _switches(tree, leaves, uplink0 + max(extra, default=0))
    tier = {t: [s.guid for s in switches if s.tier == t] for t in ("leaf", "spine", "core")}
    u = tree.uplinks
    for li, lg in enumerate(tier["leaf"]):
        for s, spg in enumerate(tier["spine"]):
            for k in range(u):
                if k == 0 and (li, s) in tree.pulled_uplinks:
                    continue
                rate = tree.uplink_rate(li, s) if k == 0 else tree.spine_rate(s)
                cables.append(Cable(End(lg, uplink0 + s * u + k), End(spg, 1 + li * u + k), rate))
    for s, spg in enumerate(tier["spine"]):
        for c, cg in enumerate(tier["core"]):
            rate = tree.spine_rate(s)
            cables.append(Cable(End(spg, len(leaves) * u + 1 + c), End(cg, 1 + s), rate))
    next_port = [uplink0 + tree.spines * u] * len(leaves)
    for la, lb in tree.leaf_links:
        ends = []
        for li in (la, lb):
            ends.append(End(tier["leaf"][li], next_port[li]))
            next_port[li] += 1
        cables.append(Cable(ends[0], ends[1], tree.rate))
    return Cabling(switches, adapters, cables)


def _switches(tree: FatTree, leaves: list[tuple[int, int]], uplink0: int) -> list[Switch]:
    """Leaves, spines and cores, with the ports they use, numbered from LID 1."""
    sg, u, names = tree.switch_guid, tree.uplinks, tree.names
    rows = [
        (sg + LEAF_GUIDS + i, tree.leaf_name(lf), "leaf", uplink0 - 1 + tree.spines * u)
        for i, lf in enumerate(leaves)
    ]
    rows += [
        (sg + SPINE_GUIDS + s, names.spine.format(fabric=tree.name, n=s + 1), "spine", 0)
        for s in range(tree.spines)
    ]
    rows += [
        (sg + CORE_GUIDS + c, names.core.format(fabric=tree.name, n=c + 1), "core", tree.spines)
        for c in range(tree.cores)
    ]
    spine_ports = len(leaves) * u + tree.cores
    return [
        Switch(guid, name, tier, nports if tier != "spine" else spine_ports, lid)
        for lid, (guid, name, tier, nports) in enumerate(rows, 1)
    ]


def _adapter_cables(
    tree: FatTree, leaves: list[tuple[int, int]]
) -> tuple[list[Adapter], list[Cable], int]:
    """The adapters, numbered after the switches; their cables to their
    leaves; and the most leaf ports any leaf gives them."""
    leaf_index = {lf: i for i, lf in enumerate(leaves)}
    leaf_guid = tree.switch_guid + LEAF_GUIDS
    next_port = [1] * len(leaves)
    lid = tree.switch_count()
    adapters: list[Adapter] = []
    cables: list[Cable] = []
    for i, host in enumerate(tree.hosts + tree.storage_hosts):
        for r in range(host.adapters):
            device = f"mlx5_{r}"
            li = leaf_index[tree.leaf_of(i, device) if i < len(tree.hosts) else (-1, 0)]
            guid = host.adapter_guid(r)
            lid += 1
            adapters.append(Adapter(host.name, device, guid, lid))
            rate = tree.rate_of(host.name, device)
            cables.append(Cable(End(guid, 1), End(leaf_guid + li, next_port[li]), rate))
            next_port[li] += 1
    return adapters, cables, max(next_port, default=1) - 1
