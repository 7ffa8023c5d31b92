"""Agent payloads as docs/agent-protocol.md describes them, built from the
protocol's structs; as plain data, so a test can then make them wrong."""

from __future__ import annotations

from typing import Any

import msgspec
from llmgw_agent.protocol import SCHEMA
from llmgw_agent.protocol.messages import (
    Cpu,
    Filesystem,
    Heartbeat,
    Memory,
    Model,
    Registration,
    System,
    Weights,
)


def registration(name: str, **overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = msgspec.to_builtins(
        Registration(
            schema=SCHEMA,
            node=name,
            agent_version="0.1.0",
            features=["heartbeat", "filesystems", "weights"],
            probed=True,
            labels={"llmgw.io/rack": "r1"},
            system=System(
                os="Debian GNU/Linux 12 (bookworm)",
                kernel="6.1.0",
                arch="x86_64",
                cpu_model="AMD EPYC 9654",
                cpu_flags=["avx2", "avx512f"],
                cpus=192,
                memory_total_bytes=1623497637888,
                nvidia_driver=None,
            ),
        )
    )
    payload.update(overrides)
    return payload


def heartbeat(name: str, **overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = msgspec.to_builtins(
        Heartbeat(
            schema=SCHEMA,
            node=name,
            cpu=Cpu(utilization_percent=12.5, load=[1.0, 0.5, 0.25]),
            memory=Memory(used_bytes=10 * 2**30, available_bytes=90 * 2**30),
            filesystems=[
                Filesystem(
                    mount="/data",
                    device="/dev/nvme0n1p1",
                    fstype="ext4",
                    shared=False,
                    free_bytes=600 * 2**30,
                    total_bytes=1000 * 2**30,
                    dirs=["/data/models", "/data/hf"],
                ),
                Filesystem(
                    mount="/lustre",
                    device="10.0.0.1@o2ib:/fs",
                    fstype="lustre",
                    shared=True,
                    free_bytes=500 * 2**40,
                    total_bytes=900 * 2**40,
                    dirs=["/lustre/models"],
                ),
            ],
            weights=Weights(
                probed=True,
                models=[Model(name="qwen2.5-7b", path="/data/models/qwen2.5-7b", shared=False)],
            ),
        )
    )
    payload.update(overrides)
    return payload


def managers_report(master: str, managers: list[dict[str, Any]]) -> dict[str, Any]:
    """The ports and subnet_managers of a heartbeat: one InfiniBand port
    whose subnet manager is `master`, and the listing of `managers`."""
    port = {
        "device": "mlx5_0",
        "port": 1,
        "link_layer": "InfiniBand",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400.0,
        "sm": next(m for m in managers if m["guid"] == master),
    }
    listing = {"port": "mlx5_0/1", "master": master, "managers": managers}
    return {"ports": [port], "subnet_managers": [listing]}
