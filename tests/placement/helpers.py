"""Small builders for node views and profiles, shared by the placement tests."""

from __future__ import annotations

from typing import Any

from llmgw.placement.types import GpuView, NodeView, Profile
from llmgw.units import GiB


def gpu_node(
    name: str,
    n: int = 8,
    cls: str = "H100",
    *,
    allocated: tuple[int, ...] = (),
    unhealthy: dict[int, str] | None = None,
    memory_gb: float | None = 512,
    cpus: int | None = 64,
    gpu_power_limit: float | None = None,
    **kw: Any,
) -> NodeView:
    sick = unhealthy or {}
    gpus = tuple(
        GpuView(
            index=i,
            uuid=f"GPU-{name}-{i}",
            gpu_class=cls,
            healthy=i not in sick,
            unhealthy_reason=sick.get(i, ""),
            allocated=i in allocated,
            power_limit_w=gpu_power_limit,
        )
        for i in range(n)
    )
    memory = None if memory_gb is None else int(memory_gb * GiB)
    return NodeView(name=name, cpus=cpus, memory_total_bytes=memory, gpus=gpus, **kw)


def cpu_node(
    name: str, *, memory_gb: float | None = 64, cpus: int | None = 32, **kw: Any
) -> NodeView:
    memory = None if memory_gb is None else int(memory_gb * GiB)
    return NodeView(name=name, cpus=cpus, memory_total_bytes=memory, **kw)


def gpu_profile(name: str = "gpu", gpus: int = 1, tp: int = 1, **kw: Any) -> Profile:
    return Profile(
        name=name,
        gpu_class=kw.pop("gpu_class", "H100"),
        gpus_per_shard=gpus,
        tensor_parallel=tp,
        **kw,
    )


def cpu_profile(name: str = "cpu", **kw: Any) -> Profile:
    return Profile(name=name, **kw)
