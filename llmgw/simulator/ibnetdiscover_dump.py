"""What ``ibnetdiscover`` prints for a rail-optimised fat tree, written directly.

The simulator answers the control plane's map request with this, so its
fabrics can be drawn and placed by; the tests use it for sizes ibsim cannot
hold. Generalised from tests/fabrics/synth.py: named hosts with GUIDs of
their own (the simulated nodes' adapters, the same GUIDs their heartbeats
report), LIDs, an optional core tier, and the faults worth showing: a cable
trained short, an adapter plugged into another rail's leaf, a cable pulled.

The text follows what the real tool prints (tests/data/ibsim/ and the real
DGX dump in tests/data/realdata/): each cable from both ends, a CA's port
GUID in ``(...)`` without leading zeros, the peer's description, LID and
``4xNDR`` in the comment. A discovery started from an adapter whose cable is
down prints that adapter's record alone, as the real tool does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Host:
    name: str
    adapters: int
    #: the node GUID of mlx5_0; mlx5_N is guid + N (port GUID = node GUID, as on ConnectX-7)
    guid: int

    def adapter_guid(self, rail: int) -> int:
        return self.guid + rail


@dataclass(frozen=True)
class FatTree:
    """A rail-optimised fat tree: rail r of host h on leaf (r, h // hosts_per_leaf),
    every leaf cabled to every spine, every spine to every core (if any)."""

    name: str
    hosts: tuple[Host, ...]
    hosts_per_leaf: int
    spines: int
    cores: int = 0
    rate: str = "4xNDR"
    switch_guid: int = 0xFC6A1C0300000000
    switch_ports: int = 64
    #: ("adapter", host, "mlx5_N") or ("uplink", leaf index, spine) -> e.g. "2xNDR"
    short: Mapping[tuple[str, str | int, str | int], str] = field(default_factory=dict)
    #: (host, "mlx5_N") -> the rail whose leaf (of the same group) it is plugged into
    miswired: Mapping[tuple[str, str], int] = field(default_factory=dict)

    @property
    def rails(self) -> int:
        return max((h.adapters for h in self.hosts), default=0)

    @property
    def groups(self) -> int:
        return (len(self.hosts) + self.hosts_per_leaf - 1) // self.hosts_per_leaf

    def leaves(self) -> list[tuple[int, int]]:
        return [(r, g) for r in range(self.rails) for g in range(self.groups)]

    def leaf_name(self, leaf: tuple[int, int]) -> str:
        return f"{self.name}-leaf-r{leaf[0]}-g{leaf[1]}"

    def leaf_of(self, host_index: int, device: str) -> tuple[int, int]:
        host = self.hosts[host_index]
        rail = self.miswired.get((host.name, device), int(device.rsplit("_", 1)[1]))
        return (rail, host_index // self.hosts_per_leaf)

    def switch_count(self) -> int:
        return len(self.leaves()) + self.spines + self.cores

    def lid_of(self, host: str, device: str) -> int:
        """The LID the subnet manager gave an adapter: switches first, then
        adapters in host order (what :func:`dump` prints)."""
        ordinal = self.switch_count()
        for h in self.hosts:
            for r in range(h.adapters):
                ordinal += 1
                if (h.name, f"mlx5_{r}") == (host, device):
                    return ordinal
        raise KeyError(f"{host} {device}")

    def rate_of(self, host: str, device: str) -> str:
        return self.short.get(("adapter", host, device), self.rate)


def _g(x: int) -> str:
    return f"{x:016x}"


def dump(
    tree: FatTree,
    initiated_from: tuple[str, str],
    down: Collection[tuple[str, str]] = (),
) -> str:
    """The ibnetdiscover text of ``tree`` as seen from the adapter
    ``(host, device)``, with the cables of ``down`` adapters pulled."""
    leaves = tree.leaves()
    leaf_index = {lf: i for i, lf in enumerate(leaves)}
    sg = tree.switch_guid
    leaf_guid = {lf: sg + 0x100 + i for i, lf in enumerate(leaves)}
    spine_guid = [sg + 0x1000 + s for s in range(tree.spines)]
    core_guid = [sg + 0x2000 + c for c in range(tree.cores)]
    lid: dict[int, int] = {}
    for guid in [*leaf_guid.values(), *spine_guid, *core_guid]:
        lid[guid] = len(lid) + 1
    names: dict[int, str] = {leaf_guid[lf]: tree.leaf_name(lf) for lf in leaves}
    names.update({g: f"{tree.name}-spine-{s + 1:02d}" for s, g in enumerate(spine_guid)})
    names.update({g: f"{tree.name}-core-{c + 1:02d}" for c, g in enumerate(core_guid)})

    # (host, device) -> (adapter guid, leaf, leaf port, rate)
    adapters: dict[tuple[str, str], tuple[int, tuple[int, int], int, str]] = {}
    next_port = dict.fromkeys(leaves, 1)
    pulled = set(down)
    for i, host in enumerate(tree.hosts):
        for r in range(host.adapters):
            device = f"mlx5_{r}"
            leaf = tree.leaf_of(i, device)
            port = next_port[leaf]
            next_port[leaf] += 1
            guid = host.adapter_guid(r)
            lid[guid] = len(lid) + 1
            names[guid] = f"{host.name} {device}"
            if (host.name, device) not in pulled:
                adapters[(host.name, device)] = (guid, leaf, port, tree.rate_of(host.name, device))
    down_ports = max(next_port.values(), default=1) - 1
    uplink0 = max(down_ports, tree.switch_ports // 2) + 1

    start = adapters.get(initiated_from)
    out = [
        "#",
        "# Topology file: generated by llmgw simulate (llmgw/simulator/ibnetdiscover_dump.py)",
        "#",
    ]
    if start is None:
        # The adapter's own cable is down: discovery never leaves it.
        host = next(h for h in tree.hosts if h.name == initiated_from[0])
        guid = host.adapter_guid(int(initiated_from[1].rsplit("_", 1)[1]))
        out += [f"# Initiated from node {_g(guid)} port {_g(guid)}", ""]
        out += _ca_header(guid, f"{initiated_from[0]} {initiated_from[1]}")
        return "\n".join(out) + "\n"
    out += [f"# Initiated from node {_g(start[0])} port {_g(start[0])}"]

    def uplink_rate(li: int, s: int) -> str:
        return tree.short.get(("uplink", li, s), tree.rate)

    for c, cg in enumerate(core_guid):
        out += _switch_header(cg, len(spine_guid), names[cg], lid[cg])
        for s, spg in enumerate(spine_guid):
            out.append(
                f'[{s + 1}]\t"S-{_g(spg)}"[{len(leaves) + c + 1}]\t\t# "{names[spg]}" '
                f"lid {lid[spg]} {tree.rate}"
            )
    for s, spg in enumerate(spine_guid):
        out += _switch_header(spg, len(leaves) + len(core_guid), names[spg], lid[spg])
        for li, lf in enumerate(leaves):
            lg = leaf_guid[lf]
            out.append(
                f'[{li + 1}]\t"S-{_g(lg)}"[{uplink0 + s}]\t\t# "{names[lg]}" lid {lid[lg]} '
                f"{uplink_rate(li, s)}"
            )
        for c, cg in enumerate(core_guid):
            out.append(
                f'[{len(leaves) + c + 1}]\t"S-{_g(cg)}"[{s + 1}]\t\t# "{names[cg]}" lid {lid[cg]} '
                f"{tree.rate}"
            )
    by_leaf: dict[tuple[int, int], list[tuple[int, str, int, str]]] = {lf: [] for lf in leaves}
    for (host_name, device), (guid, leaf, port, rate) in adapters.items():
        by_leaf[leaf].append((port, f"{host_name} {device}", guid, rate))
    for lf in leaves:
        lg = leaf_guid[lf]
        out += _switch_header(lg, uplink0 - 1 + tree.spines, names[lg], lid[lg])
        for port, desc, guid, rate in sorted(by_leaf[lf]):
            out.append(
                f'[{port}]\t"H-{_g(guid)}"[1]({guid:x}) \t\t# "{desc}" lid {lid[guid]} {rate}'
            )
        for s, spg in enumerate(spine_guid):
            out.append(
                f'[{uplink0 + s}]\t"S-{_g(spg)}"[{leaf_index[lf] + 1}]\t\t# "{names[spg]}" '
                f"lid {lid[spg]} {uplink_rate(leaf_index[lf], s)}"
            )
    for (host_name, device), (guid, leaf, port, rate) in adapters.items():
        lg = leaf_guid[leaf]
        out += _ca_header(guid, f"{host_name} {device}")
        out.append(
            f'[1]({guid:x}) \t"S-{_g(lg)}"[{port}]\t\t# lid {lid[guid]} lmc 0 "{names[lg]}" '
            f"lid {lid[lg]} {rate}"
        )
    return "\n".join(out) + "\n"


def _switch_header(guid: int, nports: int, name: str, lid: int) -> list[str]:
    return [
        "",
        "vendid=0x2c9",
        "devid=0xd2f2",
        f"sysimgguid=0x{guid:x}",
        f"switchguid=0x{guid:x}({guid:x})",
        f'Switch\t{nports} "S-{_g(guid)}"\t\t# "{name}" enhanced port 0 lid {lid} lmc 0',
    ]


def _ca_header(guid: int, desc: str) -> list[str]:
    return [
        "",
        "vendid=0x2c9",
        "devid=0x1021",
        f"sysimgguid=0x{guid:x}",
        f"caguid=0x{guid:x}",
        f'Ca\t1 "H-{_g(guid)}"\t\t# "{desc}"',
    ]
