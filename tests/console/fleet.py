"""The demo-like fleet the console tests look at: the simulator's nodes and
NVL72 rack, the example catalog, and an InfiniBand fabric whose map holds
the simulated H100 nodes' adapters (so the map has live ports of ours) and
one cable that trained short."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from llmgw.simulator.fat_tree import FatTree, Host
from llmgw.simulator.ibnetdiscover_dump import dump

ROOT = Path(__file__).resolve().parents[2]
OURS = ["sim-h100-01", "sim-h100-04", "sim-h100-08", "sim-h100-11"]
SM_MASTER, SM_STANDBY = "0x0002c90300a00201", "0x0002c90300a00301"
SHORT = ("sim-h100-08", "mlx5_3")  # the degraded cable: HDR where NDR is expected
DOWN = ("sim-h100-04", "mlx5_5")  # a port of ours whose cable is out


def fabric_text() -> str:
    """16 nodes of 8 adapters, ours first, 8 to a leaf group of 16-port
    leaves, 4 spines; the adapters' GUIDs are the ones :func:`port` reports."""
    names = OURS + [f"node{n:05d}" for n in range(len(OURS), 16)]
    hosts = tuple(Host(name, 8, 0xE09D730300000000 + n * 0x100) for n, name in enumerate(names))
    short = {("adapter", *SHORT): "4xHDR"}
    tree = FatTree("ib-a", hosts, hosts_per_leaf=8, spines=4, switch_ports=16, short=short)
    return dump(tree)


def port(name: str, device: str, xmit: int, down: bool) -> dict[str, Any]:
    n = OURS.index(name)
    return {
        "device": device,
        "port": 1,
        "link_layer": "InfiniBand",
        "state": "DOWN" if down else "ACTIVE",
        "phys_state": "Polling" if down else "LinkUp",
        "rate_gbps": 400,
        "rate_text": "4X NDR",
        "node_guid": f"0xe09d73030000{n:02x}{int(device[-1]):02x}",
        "port_guid": f"0xe09d73030000{n:02x}{int(device[-1]):02x}",
        "counters": {
            "port_xmit_data": xmit,
            "port_rcv_data": xmit // 2,
            "symbol_error": 3 if device == "mlx5_2" else 0,
        },
        "fabric": "ib-a",
        "sm": None if down else {"guid": SM_MASTER, "lid": 1, "priority": 10, "state": "MASTER"},
    }


def send_ports(name: str, step: int, down: set[tuple[str, str]], at: Any = None) -> None:
    """One heartbeat of a node's eight ports, through the inventory service
    (the path a real heartbeat takes once the agent API has checked it)."""
    from llmgw.inventory import heartbeats
    from llmgw.inventory.models import Node

    ports = [
        port(name, f"mlx5_{r}", step * (r + 1) * 40_000_000_000, (name, f"mlx5_{r}") in down)
        for r in range(8)
    ]
    managers = [
        {
            "port": "mlx5_0/1",
            "master": SM_MASTER,
            "managers": [
                {"guid": SM_MASTER, "lid": 1, "priority": 10, "state": "MASTER"},
                {"guid": SM_STANDBY, "lid": 4, "priority": 5, "state": "STANDBY"},
            ],
        }
    ]
    data = {"schema": 1, "node": name, "ports": ports, "subnet_managers": managers}
    heartbeats.heartbeat(Node.objects.get(name=name), data, at)


def build(url: str, data_dir: Path) -> None:
    from llmgw.catalog import services as catalog
    from llmgw.cli.simulate import run as simulate
    from llmgw.fabrics import ibnetdiscover, sweep, topology
    from llmgw.fabrics.models import Port

    assert simulate(url, 12, 10, "sim", True, nvl72_trays=18) == 0
    catalog.apply_text((ROOT / "deploy" / "server.example.yaml").read_text())
    # Two readings ten seconds apart, so the map has traffic to animate.
    then = timezone.now() - timedelta(seconds=10)
    for step, at in ((1, then), (2, None)):
        for name in OURS:
            send_ports(name, step, {DOWN}, at)
    fabric = Port.objects.filter(node__name=OURS[0], physical_fabric__isnull=False)[
        0
    ].physical_fabric
    analysis = topology.analyze(ibnetdiscover.parse(fabric_text()))
    sweep.store_map(fabric, analysis, timezone.now(), OURS[0])


def degraded_adapter(analysis: dict[str, Any]) -> dict[str, Any]:
    [d] = analysis["degraded_links"]
    return d
