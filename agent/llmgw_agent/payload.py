"""Registration and heartbeat payloads (docs/agent-protocol.md, schema 1).

The builders take plain data, not a machine: the simulator feeds them made-up nodes and
sends them with the same client, so what it sends is exactly what a real agent sends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from . import SCHEMA, __version__
from .collectors import Roots, make_runner, run_collectors
from .config import AgentConfig

log = logging.getLogger("llmgw_agent.payload")

SYSTEM_FIELDS = (
    "os", "kernel", "arch", "cpu_model", "cpu_flags", "cpus", "memory_total_bytes",
    "nvidia_driver",
)  # fmt: skip
HEARTBEAT_PARTS = (
    "cpu", "memory", "filesystems", "weights",
    "ports", "fabrics_changed", "fabrics_active", "subnet_managers", "notices",
)  # fmt: skip
# GPU, sensor and IMEX parts (collectors gpus, sensors, imex); each absent when unmeasured.
GPU_HEARTBEAT_PARTS = ("gpus", "sensors", "imex", "sxids", "xids_unattributed")
GPU_REGISTER_PARTS = ("gpu_topology", "imex")
# Requests this agent answers beyond the usual, and parts it can report: the control plane
# reads their absence as "too old to say", not as "has none".
OPTIONAL_FEATURES = ("filesystems", "weights")


def features_for(enabled: Mapping[str, bool]) -> list[str]:
    return ["heartbeat", *(f for f in OPTIONAL_FEATURES if enabled.get(f, True))]


def build_registration(
    node: str,
    *,
    system: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None = None,
    features: Sequence[str] = ("heartbeat", *OPTIONAL_FEATURES),
    probed: bool = True,
    simulated: bool = False,
    heartbeat_interval_s: int = 10,
    gpus: Sequence[Mapping[str, Any]] | None = None,
    fabrics: Sequence[Mapping[str, Any]] | None = None,
    agent_version: str = __version__,
) -> dict[str, Any]:
    """A registration payload. Missing system fields are sent as null: unknown, never zero."""
    given = dict(system or {})
    payload: dict[str, Any] = {
        "schema": SCHEMA,
        "node": node,
        "agent_version": agent_version,
        "features": list(features),
        "probed": probed,
        "simulated": simulated,
        "heartbeat_interval_s": heartbeat_interval_s,
        "labels": dict(labels or {}),
        "system": {k: given.get(k) for k in SYSTEM_FIELDS},
    }
    # Absent, not empty, on a node without them (a CPU node has no gpus to list).
    if gpus:
        payload["gpus"] = [dict(g) for g in gpus]
    if fabrics:
        payload["fabrics"] = [dict(f) for f in fabrics]
    return payload


def build_heartbeat(
    node: str,
    *,
    data: Mapping[str, Any],
    collectors: Iterable[Mapping[str, Any]] = (),
    sent_at: datetime | None = None,
) -> dict[str, Any]:
    """A heartbeat payload. A part missing from `data` stays absent (unknown to the server)."""
    when = (sent_at or datetime.now(UTC)).astimezone(UTC)
    payload: dict[str, Any] = {
        "schema": SCHEMA,
        "node": node,
        "sent_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    payload.update({k: data[k] for k in (*HEARTBEAT_PARTS, *GPU_HEARTBEAT_PARTS) if k in data})
    payload["collectors"] = [dict(c) for c in collectors]
    return payload


def roots_for(config: AgentConfig) -> Roots:
    return Roots(
        proc=config.proc_root,
        sys=config.sys_root,
        rootfs=config.rootfs,
        run=make_runner(config.command_wrapper),
        model_dirs=config.model_dirs,
        fabrics={f.name: f.adapters for f in config.fabrics},
    )


def collect_registration(config: AgentConfig, roots: Roots) -> dict[str, Any]:
    data, results = run_collectors(roots, part="register", enabled=config.collectors)
    for result in results:
        # Registration has no collectors list; the failure would otherwise go unseen.
        if not result["ok"]:
            log.warning("collector %s failed: %s", result["name"], result["error"])
    payload = build_registration(
        config.node,
        system=data.get("system"),
        gpus=data.get("gpus"),
        labels=config.labels,
        features=features_for(config.collectors),
        heartbeat_interval_s=max(1, round(config.heartbeat_interval_s)),
        fabrics=[f.as_dict() for f in config.fabrics],
    )
    payload.update({k: data[k] for k in GPU_REGISTER_PARTS if k in data})
    return payload


def collect_heartbeat(config: AgentConfig, roots: Roots) -> dict[str, Any]:
    data, results = run_collectors(roots, part="heartbeat", enabled=config.collectors)
    return build_heartbeat(config.node, data=data, collectors=results)
