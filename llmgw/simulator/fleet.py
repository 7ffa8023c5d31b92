"""Synthetic but realistic hardware for `llmgw simulate`.

The shapes are real machines: DGX H100 (2x Xeon 8480C, 2 TiB, 8x H100 SXM
80 GB, eight 400 Gb/s NDR adapters), A100 80 GB HGX nodes on HDR, and CPU
servers, plus a few small VMs whose CPU type hides AVX2, the case that
makes everything five times slower and nothing look wrong. Everything is a
pure function of the node's index and a seed, so a demo looks the same
every time it starts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmgw_agent.protocol import perftest
from llmgw_agent.protocol.build import build_heartbeat, build_registration, features_for
from llmgw_agent.protocol.messages import Heartbeat, Registration

from llmgw.simulator import fabrics as ib
from llmgw.simulator.engine import ShardLife
from llmgw.simulator.gpus import GpuSim, fabric, imex, topology

GiB = 2**30
TiB = 2**40


@dataclass(frozen=True)
class Shape:
    kind: str
    cpu_model: str
    cpus: int
    memory_bytes: int
    cpu_flags: tuple[str, ...]
    gpu_name: str = ""
    gpu_class: str = ""
    gpu_memory_bytes: int = 0
    gpus: int = 0
    fabric: str = ""
    adapters: int = 0
    rate_gbps: float = 0.0
    nvidia_driver: str | None = None
    local_disk_bytes: int = 2 * TiB

    @property
    def arch_x86(self) -> bool:
        return self.kind != "gb200"


AVX512 = (
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
)
AVX2 = ("avx", "avx2", "fma")

SHAPES = {
    "h100": Shape(
        "h100",
        "Intel(R) Xeon(R) Platinum 8480C",
        224,
        2 * TiB,
        AVX512,
        "NVIDIA H100 80GB HBM3",
        "H100-80GB",
        81559 * 2**20,
        8,
        "ib-a",
        8,
        400.0,
        "550.54.15",
        30 * TiB,
    ),
    "a100": Shape(
        "a100",
        "AMD EPYC 7742 64-Core Processor",
        256,
        1 * TiB,
        AVX2,
        "NVIDIA A100-SXM4-80GB",
        "A100-80GB",
        81920 * 2**20,
        8,
        "ib-b",
        4,
        200.0,
        "535.161.08",
        15 * TiB,
    ),
    "cpu": Shape(
        "cpu", "AMD EPYC 9654 96-Core Processor", 192, 768 * GiB, AVX512 + ("avx512_vnni",)
    ),
    "vm": Shape(
        "vm", "QEMU Virtual CPU version 2.5+", 8, 8 * GiB, ("sse4_2",), local_disk_bytes=100 * GiB
    ),
}
# One compute tray of a GB200 NVL72 rack: two Grace CPUs, four B200s.
SHAPES["gb200"] = Shape(
    "gb200", "Neoverse-V2", 144, 960 * GiB, ("neon", "sve", "sve2"), "NVIDIA GB200", "GB200-186GB",
    189471 * 2**20, 4, "ib-c", 4, 400.0, "570.124.06", 4 * TiB,
)  # fmt: skip
# Engines a GPU node's image carries (agent.yaml `engines:`), beside the
# ones the control plane has it install.
IMAGE_ENGINES = ("sglang", "vllm")
POWER_LIMIT_W = {"h100": 700.0, "a100": 400.0, "gb200": 1200.0}
NVLINKS = {"h100": 18, "a100": 12, "gb200": 18}
# The order nodes are dealt in: a mix that shows every case in a small fleet.
DEAL = ("h100", "a100", "cpu", "h100", "a100", "cpu", "vm", "h100", "a100", "cpu", "h100", "vm")
MODELS = (
    "llama-3.1-70b-instruct",
    "qwen2.5-7b-instruct",
    "qwen2.5-coder-14b",
    "mistral-7b-instruct",
)


@dataclass
class SimNode:
    name: str
    shape: Shape
    rack: str
    seed: int
    row: str  # set with the rack (make_fleet): a rack stands in one row
    cpu_percent: float = 10.0
    memory_used: int = 0
    local_free: int = 0
    rng: random.Random = field(default_factory=random.Random)
    held_out: bool = False
    imex_up: bool = True
    # The control plane's last answer: what it wants this node to run.
    desired: dict[str, Any] | None = None
    trays: tuple[str, ...] = ()
    gpu_sim: GpuSim | None = None
    # The InfiniBand fabric its adapters are on (set by make_fleet), and what
    # its ports report: running counter totals, like the kernel's.
    ib: ib.SimFabric | None = None
    clock: Callable[[], float] = time.monotonic
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    last_beat: float | None = None
    last_active: list[str] | None = None
    last_managers: float | None = None
    # --serve-shards: its shards start, get ready, are answered (llmgw.simulator.engine).
    serving: ShardLife | None = None

    def __post_init__(self) -> None:
        if self.shape.gpus:
            self.gpu_sim = GpuSim(self.shape.kind, self.shape.gpus, self.rng, self.held_out)

    def uuids(self) -> list[str]:
        return [
            f"GPU-{self.seed:08x}-{i:04x}-5111-{self.name.encode().hex()[:12]:0>12}"
            for i in range(self.shape.gpus)
        ]

    def commands(self) -> list[str]:
        """What its stream answers (see llmgw.cli.simulate)."""
        if self.ib is None:
            return ["command:ping"]
        return ["command:ibnetdiscover", "command:ping", *perftest.FEATURES]

    def registration(self, interval_s: float) -> Registration:
        s = self.shape
        parts: dict[str, Any] = {}
        gpus = []
        if s.gpus:
            uuids = self.uuids()
            gpus = [
                {
                    "index": i,
                    "uuid": uuids[i],
                    "name": s.gpu_name,
                    "class": s.gpu_class,
                    "memory_total_bytes": s.gpu_memory_bytes,
                    "ecc_uncorrected": 0,
                    "foreign_processes": 0,
                    "pci_bus_id": f"0000:{0x18 + 0x10 * i:02x}:00.0",
                    "numa_node": i * 2 // s.gpus,
                    "nearest_adapter": {"name": f"mlx5_{i * s.adapters // s.gpus}", "level": "PIX"},
                    "fabric": fabric(s.kind, self.held_out, i),
                }
                for i in range(s.gpus)
            ]
            parts["gpu_topology"] = topology(uuids, NVLINKS[s.kind])
            if s.kind == "gb200":
                parts["imex"] = imex(s.kind, list(self.trays), up=True)
        fabrics = [
            {
                "name": s.fabric,
                "adapters": [f"mlx5_{i}" for i in range(s.adapters)],
                "rate_gbps": s.rate_gbps,
            }
        ]
        return build_registration(
            self.name,
            agent_version="0.1.0-sim",
            features=[*features_for({}), *self.commands()],
            simulated=True,
            heartbeat_interval_s=max(1, round(interval_s)),
            labels={
                "llmgw.io/room": "hall1",
                "llmgw.io/row": self.row,
                "llmgw.io/rack": self.rack,
                "llmgw.io/pdu": f"{self.rack}-pdu{self.seed % 2}",
            },
            system={
                "os": "Ubuntu 22.04.4 LTS",
                "kernel": "5.15.0-105-generic",
                "arch": "x86_64" if s.arch_x86 else "aarch64",
                "cpu_model": s.cpu_model,
                "cpu_flags": list(s.cpu_flags),
                "cpus": s.cpus,
                "memory_total_bytes": s.memory_bytes,
                "nvidia_driver": s.nvidia_driver,
            },
            gpus=gpus,
            fabrics=fabrics if s.fabric else None,
            parts=parts,
        )

    def filesystems(self) -> list[dict[str, Any]]:
        s = self.shape
        self.local_free = int(
            min(
                s.local_disk_bytes * 0.9,
                max(s.local_disk_bytes * 0.05, self.local_free + self.rng.uniform(-1, 1) * GiB),
            )
        )
        local = ("/data", "/dev/nvme0n1p1", "ext4", False, self.local_free, s.local_disk_bytes)
        shared = None
        if s.fabric == "ib-a":
            shared = ("/lustre", "10.10.0.1@o2ib:/scratch", "lustre", True, 412 * TiB, 1200 * TiB)
        elif s.kind != "vm":
            shared = ("/shared", "filer01:/export/models", "nfs4", True, 18 * TiB, 64 * TiB)
        return [
            {
                "mount": mount,
                "device": device,
                "fstype": fstype,
                "shared": is_shared,
                "free_bytes": free,
                "total_bytes": total,
                "dirs": [f"{mount}/models"],
            }
            for mount, device, fstype, is_shared, free, total in filter(None, (local, shared))
        ]

    def heartbeat(self) -> Heartbeat:
        """The next heartbeat, checked against the protocol's bounds as an agent's is."""
        return build_heartbeat(self.name, **self.parts())

    def parts(self) -> dict[str, Any]:
        """The next heartbeat's parts, as build_heartbeat takes them."""
        s, rng = self.shape, self.rng
        # A bounded random walk: load that drifts like a real node's, not noise.
        self.cpu_percent = min(98.0, max(1.0, self.cpu_percent + rng.uniform(-4, 4)))
        self.memory_used = int(
            min(
                s.memory_bytes * 0.95,
                max(
                    s.memory_bytes * 0.05,
                    self.memory_used + rng.uniform(-0.01, 0.01) * s.memory_bytes,
                ),
            )
        )
        load = self.cpu_percent / 100 * s.cpus
        held = [MODELS[(self.seed + k) % len(MODELS)] for k in range(self.seed % 3)]
        data: dict[str, Any] = {
            "cpu": {
                "utilization_percent": round(self.cpu_percent, 1),
                "load": [round(load, 2), round(load * 0.9, 2), round(load * 0.8, 2)],
            },
            "memory": {
                "used_bytes": self.memory_used,
                "available_bytes": s.memory_bytes - self.memory_used,
            },
            "filesystems": self.filesystems(),
            "weights": {
                "probed": True,
                "models": [{"name": m, "path": f"/data/models/{m}", "shared": False} for m in held],
            },
        }
        # RAPL package power, two packages, following the CPU's load.
        data["sensors"] = {
            "cpu_packages": [
                {"package": p, "power_w": round(60 + 2.4 * self.cpu_percent, 1)} for p in (0, 1)
            ]
        }
        if self.gpu_sim is not None:
            forced = self.gpu_sim.force_wear
            data["gpus"] = self.gpu_sim.sample(s.gpu_memory_bytes, POWER_LIMIT_W[s.kind])
            if s.kind == "gb200" and (self.gpu_sim.beats % 6 == 1 or forced):
                data["imex"] = imex(s.kind, list(self.trays), up=self.imex_up)
        if self.ib is not None:
            data.update(self.ports())
        collectors = [
            {"name": n, "ok": True, "seconds": 0.001, "error": None}
            for n in ("cpu", "memory", "filesystems", "weights")
        ]
        engines, shards = self.engines()
        return {"data": data, "collectors": collectors, "engines": engines, "shards": shards}

    def set_tray(self, change: str | None, initially_held_out: bool) -> None:
        """A tray event: "out" takes IMEX down (the tray leaves its NVLink
        domain), "in" brings it back whole, None returns to how it started."""
        held_out = initially_held_out if change is None else False
        imex_up = change != "out"
        if (held_out, imex_up) == (self.held_out, self.imex_up) or self.gpu_sim is None:
            return
        self.held_out, self.imex_up = held_out, imex_up
        self.gpu_sim.held_out = held_out
        self.gpu_sim.force_wear = True

    def engines(self) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """The engine manager's report and the shards, as an agent's.

        A simulated node has the engines it is asked for, and runs none:
        its shards stay pending, saying why, so nothing routes to them (unless `serving`).

        A GPU node also has vLLM and SGLang in its image, named the way a
        real node's agent.yaml names engines it did not install (no
        version): the example catalog's GPU profiles ask for them, and a
        demo fleet that could place none of its own example models would
        show refusals that say nothing about placement."""
        wanted = (self.desired or {}).get("engines") or []
        image = [
            {
                "name": name,
                "version": None,
                "status": "installed",
                "message": "simulated node: in the node's image",
                "path": f"/opt/{name}/bin/python",
            }
            for name in (IMAGE_ENGINES if self.shape.gpus else ())
        ]
        warnings = []
        if self.shape.arch_x86 and "avx2" not in self.shape.cpu_flags:
            warnings.append(
                "this CPU has no AVX2: llama.cpp's CPU build runs about five times slower on it "
                "(a VM CPU type such as qemu64 hides it; pass the host CPU through)"
            )
        if self.desired is None:  # not told yet: say nothing rather than "has none"
            return {"warnings": warnings}, None
        report = {
            "engines_probed": True,
            "engines": [
                {
                    "name": e["name"],
                    "version": e["version"],
                    "status": "installed",
                    "message": "simulated node",
                    "path": None,
                }
                for e in wanted
            ]
            + image,
            "warnings": warnings,
        }
        if self.serving is not None:
            return report, self.serving.report(self.desired.get("shards") or [])
        shards = [
            {
                "id": sh["id"],
                "replica": sh["replica"],
                "state": "pending",
                "message": "simulated node: no engine runs here",
                "generation": sh.get("generation"),
            }
            for sh in self.desired.get("shards") or []
        ]
        return report, shards

    def ports(self) -> dict[str, Any]:
        """ports, fabrics_changed/fabrics_active and subnet_managers, as the
        agent's ib and sm collectors send them (docs/agent-protocol.md)."""
        assert self.ib is not None
        fab, rng, now = self.ib, self.rng, self.clock()
        elapsed = 0.0 if self.last_beat is None else max(0.0, now - self.last_beat)
        self.last_beat = now
        util = self.gpu_sim.util if self.gpu_sim is not None else [self.cpu_percent]
        load = 0.05 + 0.6 * sum(util) / len(util) / 100
        ports = []
        for r in range(self.shape.adapters):
            device = f"mlx5_{r}"
            guid = fab.guid(self.name, device)
            text, gbps = fab.link(self.name, device)
            down = fab.is_down(self.name, device)
            c = self.counters.get(device)
            if c is None:  # a node that has been up a while: big running totals
                base = rng.randint(10**12, 10**15)
                c = self.counters[device] = {
                    "port_xmit_data": base,
                    "port_rcv_data": base + rng.randint(0, 10**12),
                    "port_xmit_packets": base // 4096,
                    "port_rcv_packets": base // 4096,
                    "symbol_error": 0,
                    "link_downed": 0,
                    "port_rcv_errors": 0,
                    "port_xmit_discards": 0,
                    "link_error_recovery": 0,
                }
            was_down = c.get("_down", 0)
            if down and not was_down:
                c["link_downed"] += 1
            c["_down"] = int(down)
            if not down:
                # bytes/s at this share of the link's data rate
                for key, jitter in (("port_xmit_data", 1.0), ("port_rcv_data", 0.97)):
                    sent = int(gbps * 1e9 / 8 * load * jitter * rng.uniform(0.9, 1.1) * elapsed)
                    c[key] += sent
                    c[key.replace("_data", "_packets")] += sent // 4096
                if text.startswith("2X"):  # a short-trained cable is also an erring one
                    c["symbol_error"] += rng.randint(0, 3)
            ports.append(
                {
                    "device": device,
                    "port": 1,
                    "link_layer": "InfiniBand",
                    "state": "DOWN" if down else "ACTIVE",
                    "phys_state": "Polling" if down else "LinkUp",
                    "rate_gbps": 10 if down else gbps,
                    "rate_text": "4X SDR" if down else text,
                    "node_guid": guid,
                    "port_guid": guid,
                    "counters": {k: v for k, v in c.items() if not k.startswith("_")},
                    "fabric": fab.name,
                    "sm": None if down else fab.master(),
                }
            )
        out: dict[str, Any] = {"ports": ports}
        active = [p for p in ports if p["state"] == "ACTIVE"]
        fabrics_active = [fab.name] if active else []
        now_active = [f"{p['device']}/1" for p in active]
        before = None if self.last_active is None else ([fab.name] if self.last_active else [])
        changed = now_active != self.last_active
        if fabrics_active != before:
            out["fabrics_changed"] = True
            out["fabrics_active"] = fabrics_active
        if changed or self.last_managers is None or now - self.last_managers >= 60:
            self.last_managers = now
            out["subnet_managers"] = (
                [{"port": f"{active[0]['device']}/1", "master": fab.master()["guid"],
                  "managers": fab.listing()}]
                if active
                else []
            )  # fmt: skip
        self.last_active = now_active
        return out


def make_fleet(
    count: int, prefix: str = "sim", seed: int = 7, nvl72_trays: int = 0
) -> list[SimNode]:
    """`count` mixed nodes, then `nvl72_trays` GB200 trays of one NVLink
    domain, the seventh of which is held out (a card short of fabric
    resources), so there is always something to explain."""
    nodes = []
    for i in range(count):
        shape = SHAPES[DEAL[i % len(DEAL)]]
        node = SimNode(
            name=f"{prefix}-{shape.kind}-{i + 1:02d}",
            shape=shape,
            rack=f"r{1 + i // 4:02d}",
            row=f"row{1 + i // 8:02d}",  # two racks to a row, four nodes to a rack
            seed=seed * 1000 + i,
            rng=random.Random(seed * 1000 + i),
        )
        nodes.append(node)
    trays = tuple(f"{prefix}-gb200-t{t + 1:02d}" for t in range(nvl72_trays))
    for t, name in enumerate(trays):
        node = SimNode(
            name=name,
            shape=SHAPES["gb200"],
            rack="nvl72-a",
            row=f"row{1 + (count + 7) // 8:02d}",  # whole, in the row after the dealt racks
            seed=seed * 1000 + 500 + t,
            rng=random.Random(seed * 1000 + 500 + t),
            held_out=(t == 6),
            trays=trays,
        )
        nodes.append(node)
    members: dict[str, list[tuple[str, int]]] = {}
    for node in nodes:
        if node.shape.fabric:
            members.setdefault(node.shape.fabric, []).append((node.name, node.shape.adapters))
    sims = ib.build(members)
    for node in nodes:
        node.ib = sims.get(node.shape.fabric)
        node.memory_used = int(node.shape.memory_bytes * 0.2)
        node.local_free = int(node.shape.local_disk_bytes * 0.6)
    return nodes
