"""The heartbeat's readings (GPUs, sensors, IMEX, XIDs, engines, ports,
subnet managers, shards) and the GPUs of a registration.

A reading is checked as one item: a bad one is named by its place (`gpus.2`)
and the message says which field inside it (`... - at $.utilization_percent`).

Unknown is absent: every field here is optional unless the protocol says
otherwise, nothing is defaulted to zero, and a field left at None is not
sent (omit_defaults), so a reading stores only what was measured.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from .bounds import (
    Bytes,
    Celsius,
    Cores,
    Count,
    Count32,
    Gbps,
    Guid,
    Index,
    Long,
    Percent,
    Short,
    Str16,
    Str32,
    Str64,
    Str512,
    Str4096,
    Watts,
    XidCode,
)


class Reading(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A measured item, refused whole when any field of it is out of bounds."""


class Fabric(Reading):
    state: Short | None = None
    status: Short | None = None
    cluster_uuid: Short | None = None
    multi_node: bool | None = None
    clique_id: Count | None = None
    bandwidth: Short | None = None
    health: Short | None = None


class RemappedRows(Reading, omit_defaults=False):
    correctable: Count | None = None
    uncorrectable: Count | None = None
    pending: bool | Count | None = None
    failed: bool | Count | None = None


class NvlinkErrors(Reading):
    link: Index
    replay: Count | None = None
    recovery: Count | None = None
    crc_flit: Count | None = None
    crc_data: Count | None = None


class NearestAdapter(Reading, omit_defaults=False):
    name: Str64
    level: Str16 | None = None


class GpuSample(Reading):
    """One card in a heartbeat; fields by cadence (docs/agent-protocol.md)."""

    index: Index
    uuid: Str64 | None = None
    utilization_percent: Percent | None = None
    memory_used_bytes: Bytes | None = None
    memory_bandwidth_percent: Percent | None = None
    sm_clock_mhz: Count | None = None
    ecc_uncorrected: Count32 | None = None
    temperature_c: Celsius | None = None
    memory_temperature_c: Celsius | None = None
    power_draw_w: Watts | None = None
    power_limit_w: Watts | None = None
    clock_event_reasons: Annotated[list[Short], Meta(max_length=32)] | None = None
    remapped_rows: RemappedRows | None = None
    pcie_replays: Count | None = None
    nvlink_errors: Annotated[list[NvlinkErrors], Meta(max_length=64)] | None = None
    fabric: Fabric | None = None
    xids: dict[XidCode, Count] | None = None
    foreign_processes: Count32 | None = None
    error: Short | None = None


class GpuIdentity(GpuSample):
    """One card at registration: what it is, plus the sample fields."""

    name: Short | None = None
    # "class" on the wire; a Python keyword.
    gpu_class: Str64 | None = msgspec.field(default=None, name="class")
    memory_total_bytes: Bytes | None = None
    pci_bus_id: Str32 | None = None
    numa_node: Annotated[int, Meta(ge=0, le=1024)] | None = None
    nearest_adapter: NearestAdapter | None = None


class GpuTopology(Reading, omit_defaults=False):
    gpus: Annotated[list[Short | None], Meta(max_length=256)]
    matrix: Annotated[list[list[Short | None]], Meta(max_length=256)]


class CpuPackage(Reading):
    package: Index
    temperature_c: Celsius | None = None
    power_w: Watts | None = None


class Sensors(Reading):
    cpu_packages: Annotated[list[CpuPackage], Meta(max_length=64)] | None = None
    inlet_temperature_c: Celsius | None = None


class ImexNode(Reading):
    index: Count | None = None
    address: Short | None = None
    status: Short | None = None


class Imex(Reading):
    up: bool
    domain_state: Short | None = None
    nodes: Annotated[list[ImexNode], Meta(max_length=1024)] | None = None
    channels: Count | None = None
    error: Long | None = None


class Engine(Reading):
    name: Short
    status: Literal["installed", "installing", "failed"]
    version: Short | None = None
    message: Long | None = None
    path: Str4096 | None = None


# SXid or unattributed XID counters: PCI address -> code -> count.
XidCounters = dict[Short, dict[XidCode, Count]]


class ShardReport(Reading):
    id: Short
    state: Literal["pending", "starting", "loading", "ready", "failed", "stopping"]
    replica: Count | None = None
    url: Str512 | None = None
    pid: Count32 | None = None
    restarts: Count32 | None = None
    generation: Count | None = None
    message: Long | None = None
    cpu_cores: Cores | None = None
    memory_bytes: Bytes | None = None
    since: Short | None = None


class SubnetManager(Reading):
    guid: Short
    lid: Count32 | None = None
    priority: Annotated[int, Meta(ge=0, le=15)] | None = None
    state: Str16 | None = None


class PortSample(Reading):
    """One InfiniBand or RoCE port; counters are running totals in bytes
    (data) or events."""

    device: Str64
    port: Index
    link_layer: Str32 | None = None
    state: Str32 | None = None
    phys_state: Str32 | None = None
    rate_gbps: Gbps | None = None
    rate_text: Str32 | None = None
    node_guid: Guid | None = None
    port_guid: Guid | None = None
    counters: dict[Short, Count] | None = None
    fabric: Str64 | None = None
    sm: SubnetManager | None = None
    roce_network: Str64 | None = None


class ManagerListing(Reading):
    port: Short
    managers: Annotated[list[SubnetManager], Meta(max_length=64)]
    master: Short | None = None
