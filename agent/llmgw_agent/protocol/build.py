"""Building payloads from plain data: the agent's collectors' output, or
the simulator's made-up nodes, so what the simulator sends is exactly what a
real agent sends.

Building checks every bound the control plane checks (msgspec.convert into
the structs): a payload it would refuse raises msgspec.ValidationError here,
naming the field, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from . import SCHEMA
from .messages import Heartbeat, Registration, System

SYSTEM_FIELDS = tuple(f.name for f in msgspec.structs.fields(System))
# What the collectors measure for a heartbeat; each absent when unmeasured.
HEARTBEAT_PARTS = (
    "cpu", "memory", "filesystems", "weights",
    "ports", "fabrics_changed", "fabrics_active", "subnet_managers", "notices",
    "gpus", "sensors", "imex", "sxids", "xids_unattributed",
)  # fmt: skip
# GPU and IMEX parts of a registration (collectors gpu_inventory, imex).
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
    parts: Mapping[str, Any] | None = None,
    agent_version: str,
) -> Registration:
    """A registration. Missing system fields are sent as null: unknown, never zero.
    `parts`: GPU_REGISTER_PARTS as measured (absent when not)."""
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
        # cpu_flags is a list, which is never null: unknown, it is left out.
        "system": {k: given.get(k) for k in SYSTEM_FIELDS if k in given or k != "cpu_flags"},
    }
    # Absent, not empty, on a node without them (a CPU node has no gpus to list).
    if gpus:
        payload["gpus"] = list(gpus)
    if fabrics:
        payload["fabrics"] = list(fabrics)
    payload.update({k: v for k, v in (parts or {}).items() if k in GPU_REGISTER_PARTS})
    return msgspec.convert(payload, Registration)


def build_heartbeat(
    node: str,
    *,
    data: Mapping[str, Any],
    collectors: Iterable[Mapping[str, Any]] = (),
    engines: Mapping[str, Any] | None = None,
    shards: Sequence[Mapping[str, Any]] | None = None,
    sent_at: datetime | None = None,
    desired_digest: str | None = None,
) -> Heartbeat:
    """A heartbeat. A part missing from `data` stays absent (unknown to the server).
    `engines` is the engine manager's report (engines, engines_probed, warnings);
    `shards` the supervisor's; both absent when not given. `desired_digest`:
    the digest of the desired state last taken, absent when none was."""
    payload = heartbeat_payload(
        node,
        data=data,
        collectors=collectors,
        engines=engines,
        shards=shards,
        sent_at=sent_at,
        desired_digest=desired_digest,
    )
    return msgspec.convert(payload, Heartbeat)


def heartbeat_payload(
    node: str,
    *,
    data: Mapping[str, Any],
    collectors: Iterable[Mapping[str, Any]] = (),
    engines: Mapping[str, Any] | None = None,
    shards: Sequence[Mapping[str, Any]] | None = None,
    sent_at: datetime | None = None,
    desired_digest: str | None = None,
) -> dict[str, Any]:
    """What build_heartbeat checks and returns, as plain data, unchecked: for
    a sender of thousands of heartbeats a second (the simulator) that checks
    only some of them, the server checking every one anyway."""
    when = (sent_at or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    payload: dict[str, Any] = {"schema": SCHEMA, "node": node, "sent_at": when}
    payload.update({k: data[k] for k in HEARTBEAT_PARTS if k in data})
    payload["collectors"] = list(collectors)
    payload.update(engines or {})
    if shards is not None:
        payload["shards"] = list(shards)
    if desired_digest:
        payload["desired_digest"] = desired_digest
    return payload
