"""Join, registration and heartbeat, and the heartbeat's answer
(docs/agent-protocol.md).

A field that may be left out is UNSET by default and then not sent: the
control plane tells "not measured" (absent) from "measured, none" (null or
empty), and stores only what a payload holds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from . import SCHEMA
from .bounds import (
    BlankOrText64,
    BlankOrText200,
    BlankOrText1024,
    Bytes,
    Name,
    NonNegative,
    Percent,
    Text32,
    Text64,
    Text200,
    Text253,
    Text255,
    Text1024,
    Text2000,
)
from .telemetry import (
    Engine,
    GpuIdentity,
    GpuSample,
    GpuTopology,
    Imex,
    ManagerListing,
    PortSample,
    Sensors,
    ShardReport,
    XidCounters,
)

Schema = Literal[1]
assert SCHEMA == 1, "Schema above must name the same version"


class Message(msgspec.Struct, kw_only=True):
    """What the agent sends; checked field by field when refused."""


class Join(Message, kw_only=True):
    schema: Schema
    node: Name
    token: Text200


class System(Message, kw_only=True):
    os: BlankOrText200 | None | UnsetType = UNSET
    kernel: BlankOrText200 | None | UnsetType = UNSET
    arch: BlankOrText64 | None | UnsetType = UNSET
    cpu_model: BlankOrText200 | None | UnsetType = UNSET
    cpu_flags: Annotated[list[Text32], Meta(max_length=256)] | UnsetType = UNSET
    cpus: Annotated[int, Meta(ge=1, le=65536)] | None | UnsetType = UNSET
    memory_total_bytes: Bytes | None | UnsetType = UNSET
    nvidia_driver: BlankOrText64 | None | UnsetType = UNSET


class FabricDeclared(Message, kw_only=True):
    """A fabric agent.yaml declares: its name and the adapters on it."""

    name: Name
    adapters: Annotated[list[Text64], Meta(max_length=64)]
    rate_gbps: NonNegative | None | UnsetType = UNSET


class Registration(Message, kw_only=True):
    schema: Schema
    node: Name
    agent_version: Text64
    features: Annotated[list[Text64], Meta(max_length=128)] | UnsetType = UNSET
    probed: bool = False
    simulated: bool = False
    heartbeat_interval_s: Annotated[int, Meta(ge=1, le=3600)] = 10
    labels: dict[str, Text253] | UnsetType = UNSET
    system: System
    gpus: Annotated[list[GpuIdentity], Meta(max_length=256)] | UnsetType = UNSET
    gpu_topology: GpuTopology | UnsetType = UNSET
    imex: Imex | UnsetType = UNSET
    fabrics: list[FabricDeclared] | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.gpus and len({g.index for g in self.gpus}) != len(self.gpus):
            raise ValueError("gpus: two GPUs share one index")


class Cpu(Message, kw_only=True):
    utilization_percent: Percent | None
    load: Annotated[list[NonNegative], Meta(min_length=3, max_length=3)]


class Memory(Message, kw_only=True):
    used_bytes: Bytes | None
    available_bytes: Bytes | None


class Filesystem(Message, kw_only=True):
    mount: Text1024
    device: BlankOrText1024 | UnsetType = UNSET
    fstype: BlankOrText64 | UnsetType = UNSET
    shared: bool
    free_bytes: Bytes
    total_bytes: Bytes
    dirs: Annotated[list[Text1024], Meta(max_length=64)] | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.free_bytes > self.total_bytes:
            raise ValueError("free_bytes: is larger than total_bytes")


class Model(Message, kw_only=True):
    name: Text255
    path: Text1024
    shared: bool


class Weights(Message, kw_only=True):
    probed: bool
    models: Annotated[list[Model], Meta(max_length=10000)]


class CollectorResult(Message, kw_only=True):
    name: Text64
    ok: bool
    seconds: NonNegative
    error: Text2000 | None | UnsetType = UNSET


class Heartbeat(Message, kw_only=True):
    schema: Schema
    node: Name
    sent_at: datetime | UnsetType = UNSET
    cpu: Cpu | UnsetType = UNSET
    memory: Memory | UnsetType = UNSET
    filesystems: Annotated[list[Filesystem], Meta(max_length=256)] | UnsetType = UNSET
    weights: Weights | UnsetType = UNSET
    collectors: Annotated[list[CollectorResult], Meta(max_length=64)] | UnsetType = UNSET
    gpus: Annotated[list[GpuSample], Meta(max_length=256)] | UnsetType = UNSET
    sensors: Sensors | UnsetType = UNSET
    imex: Imex | UnsetType = UNSET
    sxids: XidCounters | UnsetType = UNSET
    xids_unattributed: XidCounters | UnsetType = UNSET
    engines: Annotated[list[Engine], Meta(max_length=64)] | UnsetType = UNSET
    engines_probed: bool | UnsetType = UNSET
    ports: Annotated[list[PortSample], Meta(max_length=256)] | UnsetType = UNSET
    shards: Annotated[list[ShardReport], Meta(max_length=256)] | UnsetType = UNSET
    fabrics_changed: bool | UnsetType = UNSET
    fabrics_active: Annotated[list[Text64], Meta(max_length=64)] | UnsetType = UNSET
    subnet_managers: Annotated[list[ManagerListing], Meta(max_length=256)] | UnsetType = UNSET
    notices: Annotated[list[Text2000], Meta(max_length=32)] | UnsetType = UNSET
    warnings: Annotated[list[Text2000], Meta(max_length=32)] | UnsetType = UNSET
    # The digest of the desired state the agent holds, as the answer that
    # carried it said; absent (an agent just started, or an older one): the
    # answer carries the desired state in full.
    desired_digest: Text64 | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.filesystems and len({fs.mount for fs in self.filesystems}) != len(self.filesystems):
            raise ValueError("filesystems: a mount is reported twice; report each filesystem once")


class Desired(msgspec.Struct, kw_only=True):
    """What the control plane wants the node to run, in full. Each entry is
    left as sent: the agent checks engines (EngineSpec) and shards (the
    supervisor) one by one, so one malformed entry stops only itself."""

    engines: list[dict[str, Any]] | None = None
    shards: list[dict[str, Any]] | None = None


class Answer(msgspec.Struct, kw_only=True):
    """The answer to a registration or a heartbeat."""

    node: str
    state: str
    # True: the control plane lost the registration; send it again.
    register: bool = False
    # None when unchanged since the digest the heartbeat sent, or from a
    # control plane too old to say: keep converging on what was.
    desired: Desired | None = None
    # The digest of the node's desired state: sent back in each heartbeat,
    # so the next answer carries `desired` only when it changed.
    desired_digest: str | None = None


class Joined(msgspec.Struct, kw_only=True):
    node: str
    credential: str
