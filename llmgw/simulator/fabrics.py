"""The simulated fleet's InfiniBand fabrics: ports, subnet managers and maps.

Each declared fabric (ib-a: DGX H100 on NDR, ib-b: A100 HGX on HDR, ib-c:
GB200 trays on NDR) is one rail-optimised fat tree holding the simulated
nodes' adapters, with the GUIDs their heartbeats report, among synthetic
hosts that do not run an agent, so a map looks like a real fabric of a few
hundred adapters. Each has what a drawing should show: one cable trained
short and one adapter on another rail's leaf. Subnet managers run on two
UFM hosts of the fabric, a master and a standby, except on ib-b, whose
standby is missing (the "no standby" problem).

Cables change live: ``llmgw simulate-event cable-down NODE DEVICE`` writes
``<LLMGW_DATA_DIR>/simulator/cables.json``, which ``llmgw simulate`` reads
on every beat (see :func:`write_event`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llmgw.simulator.fat_tree import FatTree, Host
from llmgw.simulator.ibnetdiscover_dump import dump

SPEEDS = {"NDR": 100.0, "HDR": 50.0}


@dataclass(frozen=True)
class Spec:
    name: str
    speed: str  # NDR, HDR
    hosts: int  # hosts in the fabric, simulated and synthetic
    hosts_per_leaf: int
    spines: int
    cores: int
    adapter_guid: int
    switch_guid: int
    synthetic: str  # name prefix of hosts that run no agent
    # Simulated node k sits at position k * spread: spread them over leaves.
    spread: int
    standby: bool
    # What is wrong with it: ("sim", k, device) is the k-th simulated node's adapter.
    short: tuple[Any, ...]
    miswired: tuple[Any, ...]


SPECS = {
    "ib-a": Spec(
        "ib-a", "NDR", 32, 16, 8, 4, 0xA088C20300740000, 0xFC6A1C0300A00000, "dgx-a",
        spread=8, standby=True,
        short=("adapter", ("sim", 1, "mlx5_3"), "2xNDR"),
        miswired=(("dgx-a-021", "mlx5_5"), 6),
    ),
    "ib-b": Spec(
        "ib-b", "HDR", 64, 16, 4, 0, 0x043F720300B20000, 0x0C42A10300B00000, "hgx-b",
        spread=8, standby=False,
        short=("uplink", (2, 1), "2xHDR"),
        miswired=(("sim", 2, "mlx5_2"), 3),
    ),
    "ib-c": Spec(
        "ib-c", "NDR", 64, 16, 4, 0, 0xB8E9240300C40000, 0x9C63C00300C00000, "gb200-c",
        spread=1, standby=True,
        short=("adapter", ("gb200-c-030", "mlx5_1"), "2xNDR"),
        miswired=(("gb200-c-041", "mlx5_0"), 2),
    ),
}  # fmt: skip
SM_PRIORITY = (14, 10)


@dataclass
class SimFabric:
    spec: Spec
    tree: FatTree
    #: the nodes the simulator runs on this fabric
    members: tuple[str, ...]
    #: (host, priority) of each subnet manager, master first
    managers: tuple[tuple[str, int], ...]
    #: live cable changes: (host, device) -> "down" | "short"
    cables: dict[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Both are read for every port on every beat; scanning the tree for
        # them each time made a fleet of thousands quadratic. The tree and
        # its managers never change; live cable changes touch neither.
        self._hosts = {h.name: h for h in self.tree.hosts}
        self._records: dict[tuple[str, int, str], dict[str, Any]] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    def host(self, name: str) -> Host:
        return self._hosts[name]

    def guid(self, node: str, device: str) -> str:
        return f"0x{self.host(node).adapter_guid(int(device.rsplit('_', 1)[1])):016x}"

    def link(self, node: str, device: str) -> tuple[str, float]:
        """("4X NDR", 400.0) as sysfs says it, after any live change."""
        text = self.tree.rate_of(node, device)
        if self.cables.get((node, device)) == "short":
            text = "2x" + self.spec.speed
        width = int(text.split("x", 1)[0])
        return f"{width}X {self.spec.speed}", width * SPEEDS[self.spec.speed]

    def is_down(self, node: str, device: str) -> bool:
        return self.cables.get((node, device)) == "down"

    def sm_record(self, host: str, priority: int, state: str) -> dict[str, Any]:
        key = (host, priority, state)
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = {
                "guid": self.guid(host, "mlx5_0"),
                "lid": self.tree.lid_of(host, "mlx5_0"),
                "priority": priority,
                "state": state,
            }
        return dict(record)

    def master(self) -> dict[str, Any]:
        host, priority = self.managers[0]
        return self.sm_record(host, priority, "MASTER")

    def listing(self) -> list[dict[str, Any]]:
        return [
            self.sm_record(h, p, "MASTER" if i == 0 else "STANDBY")
            for i, (h, p) in enumerate(self.managers)
        ]

    def live_tree(self) -> FatTree:
        shorts: dict[tuple[str, str | int, str | int], str] = {
            ("adapter", h, d): "2x" + self.spec.speed
            for (h, d), what in self.cables.items()
            if what == "short"
        }
        return replace(self.tree, short={**self.tree.short, **shorts}) if shorts else self.tree

    def discover(self, node: str, device: str) -> str:
        """What ibnetdiscover prints on ``node`` through ``device``."""
        down = {k for k, what in self.cables.items() if what == "down"}
        return dump(self.live_tree(), (node, device), down=down)


def _resolve(ref: tuple[Any, ...], sims: list[str], synthetic: str) -> tuple[str, str]:
    """(host, device) of a fault: a simulated node's adapter when the fleet
    has that many nodes on the fabric, else a synthetic host's."""
    if ref[0] != "sim":
        return ref[0], ref[1]
    if ref[1] < len(sims):
        return sims[ref[1]], ref[2]
    return f"{synthetic}-007", ref[2]


def build(members: dict[str, list[tuple[str, int]]]) -> dict[str, SimFabric]:
    """Fabrics for the simulated nodes: fabric name -> [(node, adapters)]."""
    out: dict[str, SimFabric] = {}
    for name, nodes in members.items():
        spec = SPECS.get(name)
        if spec is None or not nodes:
            continue
        rails = max(a for _, a in nodes)
        ufm = [f"ufm-{name.split('-')[-1]}-{k + 1:02d}" for k in range(2 if spec.standby else 1)]
        total = max(spec.hosts, (len(nodes) - 1) * spec.spread + 1 + len(ufm))
        slots: list[tuple[str, int] | None] = [None] * total
        # The subnet managers' hosts take the last places, inside the last leaf group.
        for k, u in enumerate(ufm):
            slots[total - len(ufm) + k] = (u, 1)
        for k, node in enumerate(nodes):
            at = k * spec.spread
            while slots[at] is not None:
                at += 1
            slots[at] = node
        synthetic = iter(range(1, total + 1))
        hosts: list[Host] = []
        for i, slot in enumerate(slots):
            host_name, adapters = (
                slot if slot else (f"{spec.synthetic}-{next(synthetic):03d}", rails)
            )
            hosts.append(Host(host_name, adapters, spec.adapter_guid + i * 0x10))
        sims = [n for n, _ in nodes]
        short: dict[tuple[str, str | int, str | int], str] = {}
        kind, where, rate = spec.short
        if kind == "uplink":
            short[("uplink", where[0], where[1])] = rate
        else:
            short[("adapter", *_resolve(where, sims, spec.synthetic))] = rate
        ref, rail = spec.miswired
        mis_host, mis_device = _resolve(ref, sims, spec.synthetic)
        tree = FatTree(
            name,
            tuple(hosts),
            spec.hosts_per_leaf,
            spec.spines,
            spec.cores,
            rate=f"4x{spec.speed}",
            switch_guid=spec.switch_guid,
            switch_ports=64 if spec.speed == "NDR" else 40,
            short=short,
            miswired={(mis_host, mis_device): rail},
        )
        out[name] = SimFabric(spec, tree, tuple(sims), tuple(zip(ufm, SM_PRIORITY, strict=False)))
    return out


# -- live changes ---------------------------------------------------------

EVENTS = ("cable-down", "cable-short", "cable-up", "tray-out", "tray-in", "reset")


def cables_file(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / "simulator" / "cables.json"


def read_trays(path: Path) -> dict[str, str]:
    """NVL72 trays changed live: node -> "out" or "in"."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {n: v for n, v in (raw.get("trays") or {}).items() if v in ("out", "in")}


def read_cables(path: Path) -> dict[tuple[str, str], str]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for key, what in (raw.get("cables") or {}).items():
        node, _, device = key.partition(" ")
        if device and what in ("down", "short"):
            out[(node, device)] = what
    return out


def write_event(path: Path, event: str, node: str = "", devices: Iterable[str] = ()) -> None:
    """Change the simulated cables the running simulator reads each beat."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}: one of {', '.join(EVENTS)}")
    cables = {} if event == "reset" else read_cables(path)
    trays = {} if event == "reset" else read_trays(path)
    if event in ("tray-out", "tray-in"):
        trays[node] = event.removeprefix("tray-")
        devices = ()
    for device in devices:
        if event == "cable-up":
            cables.pop((node, device), None)
        elif event != "reset":
            cables[(node, device)] = "down" if event == "cable-down" else "short"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "cables": {f"{n} {d}": what for (n, d), what in sorted(cables.items())},
        "trays": dict(sorted(trays.items())),
    }
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        json.dump(body, tmp, indent=1)
    os.replace(tmp.name, path)  # the simulator never reads half a file
