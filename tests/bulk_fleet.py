"""A large fleet written straight into the database: node rows with their
GPUs, filesystems and weights, as heartbeats would have left them, in a few
bulk INSERTs. 5,000 nodes through the agent API would take minutes; the
list, the summary and the cluster page only read these rows.

Racks of RACK_SIZE nodes under site/room/row labels and a PDU per half
rack, mostly Ready, some cordoned, some silent (NotReady), some installing
an engine; a quarter CPU machines, the rest 8 GPUs of one of three
classes. Used by the tests (a few dozen nodes) and bench/ (5,000).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

CLASSES = (("H100-80GB", 80), ("A100-40GB", 40), ("L40S-48GB", 48))
RACK_SIZE = 20
GiB = 2**30
# Long enough that a benchmark's nodes stay Ready while it runs.
INTERVAL_S = 3600


def rack_of(i: int) -> str:
    return f"r{i // RACK_SIZE:03d}"


def name_of(i: int) -> str:
    return f"node-{i:05d}"


def gpu_class_of(i: int) -> str | None:
    """A quarter of the nodes are CPU machines (every fourth rack)."""
    if (i // RACK_SIZE) % 4 == 3:
        return None
    return CLASSES[(i // RACK_SIZE) % 4 % 3][0]


def is_silent(i: int) -> bool:
    return i % 50 == 7


def is_cordoned(i: int) -> bool:
    return i % 97 == 5


def _node(i: int, now: Any) -> Any:
    from llmgw.inventory.choices import NodeState
    from llmgw.inventory.models import Node

    rack = rack_of(i)
    engine = {"name": "llama.cpp", "version": "b11434", "status": "installed", "message": ""}
    if i % 40 == 13:
        engine = {
            **engine,
            "status": "installing",
            "message": "downloading llama-b11434-bin-ubuntu-x64.tar.gz (16 MB)",
        }
    return Node(
        name=name_of(i),
        # A silent node as the staleness pass left it: a control plane that
        # could hear it marked it NotReady (llmgw.inventory.readiness counts
        # silence from when hearing resumed only for nodes still stored Ready).
        state=NodeState.NOT_READY if is_silent(i) else NodeState.READY,
        simulated=True,
        agent_labels={
            "llmgw.io/site": "fra1",
            "llmgw.io/room": f"hall{i // 2000 + 1}",
            "llmgw.io/row": f"row{i // 200:02d}",
            "llmgw.io/rack": rack,
            "llmgw.io/pdu": f"{rack}-pdu{i % RACK_SIZE // (RACK_SIZE // 2)}",
        },
        agent_version="0.1.0",
        probed=True,
        os="Ubuntu 24.04",
        arch="x86_64",
        cpu_model="AMD EPYC 9654",
        cpus=192 if gpu_class_of(i) else 128,
        memory_total_bytes=(2048 if gpu_class_of(i) else 1024) * GiB,
        heartbeat_interval_s=INTERVAL_S,
        registered_at=now - timedelta(days=3),
        last_heartbeat_at=now - timedelta(seconds=4 * INTERVAL_S if is_silent(i) else 5),
        measured_at=now - timedelta(seconds=5),
        cpu_utilization_percent=float(i * 37 % 100),
        memory_used_bytes=(i * 13 % 100) * 10 * GiB,
        memory_available_bytes=900 * GiB,
        cordoned=is_cordoned(i),
        cordon_reason="XID 79 on GPU 3" if is_cordoned(i) else "",
        cordoned_by="ops" if is_cordoned(i) else "",
        cordoned_at=now if is_cordoned(i) else None,
        engines=[engine],
        engines_probed=True,
        weights_probed=True,
    )


def build(count: int, start: int = 0) -> list[str]:
    """Nodes start..start+count-1; returns their names."""
    from django.utils import timezone

    from llmgw.inventory.models import Filesystem, Gpu, ModelHolding, Node

    now = timezone.now()
    nodes = Node.objects.bulk_create(
        [_node(i, now) for i in range(start, start + count)], batch_size=1000
    )
    gpus, disks, holdings = [], [], []
    for i, node in zip(range(start, start + count), nodes, strict=True):
        cls = gpu_class_of(i)
        memory = dict(CLASSES).get(cls or "", 0) * 10**9
        for g in range(8 if cls else 0):
            bad = "XID 79: fell off the bus" if (i % 211 == 3 and g == 3) else ""
            uuid = f"GPU-{i:08x}-{g:04x}"
            gpus.append(
                Gpu(
                    node=node,
                    index=g,
                    uuid=uuid,
                    name=cls,
                    gpu_class=cls,
                    memory_total_bytes=memory,
                    unhealthy_reason=bad,
                )  # fmt: skip
            )
        disks.append(
            Filesystem(
                node=node,
                mount="/",
                device="/dev/nvme0n1p2",
                fstype="ext4",
                free_bytes=(200 + i % 700) * GiB,
                total_bytes=1000 * GiB,
                reported_at=now,
            )  # fmt: skip
        )
        if i % 3 == 0:
            holdings.append(
                ModelHolding(node=node, model_name="llama-3.1-8b", path="/models/llama-3.1-8b")
            )
    Gpu.objects.bulk_create(gpus, batch_size=5000)
    Filesystem.objects.bulk_create(disks, batch_size=5000)
    ModelHolding.objects.bulk_create(holdings, batch_size=5000)
    return [n.name for n in nodes]
