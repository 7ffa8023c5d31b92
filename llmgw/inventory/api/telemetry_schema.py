"""The heartbeat's telemetry sections (GPUs, sensors, IMEX, XIDs, engines),
typed once with msgspec and used by both validators: the fast path decodes
them with the rest of the body, and the DRF serializer checks each section
(each list item on its own) with the same types, so a bad item is named
with its index and the field msgspec stopped at. One definition, so the two
paths cannot drift apart on these sections.

Unknown is absent: every field here is optional unless the protocol says
otherwise, and nothing is defaulted to zero.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from rest_framework import serializers

Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
# What lands in a 32-bit column (Gpu, Shard, SubnetManager) is bounded by
# it: the services store it after the measurements, so a number the column
# refuses must be refused here, not by the database halfway through.
Count32 = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
Bytes = Count
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
Celsius = Annotated[float, msgspec.Meta(ge=-100, le=250)]
Watts = Annotated[float, msgspec.Meta(ge=0, le=100_000)]
Short = Annotated[str, msgspec.Meta(max_length=128)]
Long = Annotated[str, msgspec.Meta(max_length=2000)]
Index = Annotated[int, msgspec.Meta(ge=0, le=255)]
# An XID or SXid code: decimal digits, as the agent writes str(code). Readers
# turn it into a number, and "²".isdigit() is True where int("²") raises.
XidCode = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,10}\Z")]
# "0x" and 16 hex digits (docs/agent-protocol.md), stored as sent.
Guid = Annotated[str, msgspec.Meta(max_length=18)]


def _text(max_length: int) -> Any:
    """A string that fits its column of `max_length` characters."""
    return Annotated[str, msgspec.Meta(max_length=max_length)]


class Fabric(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False):
    state: Short | None = None
    status: Short | None = None
    cluster_uuid: Short | None = None
    multi_node: bool | None = None
    clique_id: Count | None = None
    bandwidth: Short | None = None
    health: Short | None = None


class RemappedRows(msgspec.Struct):
    correctable: Count | None = None
    uncorrectable: Count | None = None
    pending: bool | Count | None = None
    failed: bool | Count | None = None


class NvlinkErrors(msgspec.Struct, omit_defaults=True):
    link: Index
    replay: Count | None = None
    recovery: Count | None = None
    crc_flit: Count | None = None
    crc_data: Count | None = None


class NearestAdapter(msgspec.Struct):
    name: _text(64)  # type: ignore[valid-type]
    level: _text(16) | None = None  # type: ignore[valid-type]


class GpuSample(msgspec.Struct, omit_defaults=True):
    """One card in a heartbeat; fields by cadence (docs/agent-protocol.md)."""

    index: Index
    uuid: _text(64) | None = None  # type: ignore[valid-type]
    utilization_percent: Percent | None = None
    memory_used_bytes: Bytes | None = None
    memory_bandwidth_percent: Percent | None = None
    sm_clock_mhz: Count | None = None
    ecc_uncorrected: Count32 | None = None
    temperature_c: Celsius | None = None
    memory_temperature_c: Celsius | None = None
    power_draw_w: Watts | None = None
    power_limit_w: Watts | None = None
    clock_event_reasons: Annotated[list[Short], msgspec.Meta(max_length=32)] | None = None
    remapped_rows: RemappedRows | None = None
    pcie_replays: Count | None = None
    nvlink_errors: Annotated[list[NvlinkErrors], msgspec.Meta(max_length=64)] | None = None
    fabric: Fabric | None = None
    xids: dict[XidCode, Count] | None = None
    foreign_processes: Count32 | None = None
    error: Short | None = None


class GpuIdentity(GpuSample, omit_defaults=True):
    """One card at registration: what it is, plus the sample fields."""

    name: Short | None = None
    # "class" on the wire; a Python keyword.
    gpu_class: _text(64) | None = msgspec.field(default=None, name="class")  # type: ignore[valid-type]
    memory_total_bytes: Bytes | None = None
    pci_bus_id: _text(32) | None = None  # type: ignore[valid-type]
    numa_node: Annotated[int, msgspec.Meta(ge=0, le=1024)] | None = None
    nearest_adapter: NearestAdapter | None = None


class GpuTopology(msgspec.Struct):
    gpus: Annotated[list[Short | None], msgspec.Meta(max_length=256)]
    matrix: Annotated[list[list[Short | None]], msgspec.Meta(max_length=256)]


class CpuPackage(msgspec.Struct, omit_defaults=True):
    package: Index
    temperature_c: Celsius | None = None
    power_w: Watts | None = None


class Sensors(msgspec.Struct, omit_defaults=True):
    cpu_packages: Annotated[list[CpuPackage], msgspec.Meta(max_length=64)] | None = None
    inlet_temperature_c: Celsius | None = None


class ImexNode(msgspec.Struct, omit_defaults=True):
    index: Count | None = None
    address: Short | None = None
    status: Short | None = None


class Imex(msgspec.Struct, omit_defaults=True):
    up: bool
    domain_state: Short | None = None
    nodes: Annotated[list[ImexNode], msgspec.Meta(max_length=1024)] | None = None
    channels: Count | None = None
    error: Long | None = None


class Engine(msgspec.Struct, omit_defaults=True):
    name: Short
    status: Literal["installed", "installing", "failed"]
    version: Short | None = None
    message: Long | None = None
    path: Annotated[str, msgspec.Meta(max_length=4096)] | None = None


XidCounters = dict[Short, dict[XidCode, Count]]


class ShardReport(msgspec.Struct, omit_defaults=True):
    id: Short
    state: Literal["pending", "starting", "loading", "ready", "failed", "stopping"]
    replica: Count | None = None
    url: Annotated[str, msgspec.Meta(max_length=512)] | None = None
    pid: Count32 | None = None
    restarts: Count32 | None = None
    generation: Count | None = None
    message: Long | None = None
    cpu_cores: Annotated[float, msgspec.Meta(ge=0, le=100_000)] | None = None
    memory_bytes: Bytes | None = None
    since: Short | None = None


class SubnetManager(msgspec.Struct, omit_defaults=True):
    guid: Short
    lid: Count32 | None = None
    priority: Annotated[int, msgspec.Meta(ge=0, le=15)] | None = None
    state: _text(16) | None = None  # type: ignore[valid-type]


class PortSample(msgspec.Struct, omit_defaults=True):
    """One InfiniBand or RoCE port; counters are running totals in bytes
    (data) or events."""

    device: _text(64)  # type: ignore[valid-type]
    port: Index
    link_layer: _text(32) | None = None  # type: ignore[valid-type]
    state: _text(32) | None = None  # type: ignore[valid-type]
    phys_state: _text(32) | None = None  # type: ignore[valid-type]
    rate_gbps: Annotated[float, msgspec.Meta(ge=0, le=100_000)] | None = None
    rate_text: _text(32) | None = None  # type: ignore[valid-type]
    node_guid: Guid | None = None
    port_guid: Guid | None = None
    counters: dict[Short, Count] | None = None
    fabric: _text(64) | None = None  # type: ignore[valid-type]
    sm: SubnetManager | None = None
    roce_network: _text(64) | None = None  # type: ignore[valid-type]


class ManagerListing(msgspec.Struct, omit_defaults=True):
    port: Short
    managers: Annotated[list[SubnetManager], msgspec.Meta(max_length=64)]
    master: Short | None = None


def to_builtins(value: Any) -> Any:
    return msgspec.to_builtins(value)


class MsgspecField(serializers.Field):
    """A DRF field checked by a msgspec type; the error says where inside."""

    def __init__(self, spec: Any, **kwargs: Any) -> None:
        self.spec = spec
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return msgspec.to_builtins(msgspec.convert(data, self.spec))
        except msgspec.ValidationError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: Any) -> Any:
        return value

    def __deepcopy__(self, memo: dict[int, Any]) -> MsgspecField:
        # DRF copies its fields per serializer; a msgspec type is immutable
        # and cannot be deep-copied, so it is shared.
        return MsgspecField(self.spec, **self._kwargs)


def listing(spec: Any, max_length: int) -> serializers.ListField:
    return serializers.ListField(child=MsgspecField(spec), max_length=max_length, required=False)
