"""GPUs through NVML: what each card is (registration) and how it is doing (heartbeat).

Cadence, by memo timestamps (docs/agent-protocol.md): utilisation, memory, bandwidth,
SM clock and uncorrected ECC every heartbeat; temperatures, power and clock-event
reasons at most every 10 s; XIDs, remapped rows, PCIe replays, NVLink errors and the
fabric every minute. A field absent from a heartbeat was not sampled this time (or the
card cannot tell); it is never sent as 0.

Without NVML (no driver) these collectors return nothing: no `gpus` key at all.
Injected through memo: "gpu.own_pids" (the agent's engine PIDs, a set; processes not in
it are foreign), "gpu.kernel_log" (a callable returning new kernel log lines) and
"clock" (monotonic seconds).
"""

from __future__ import annotations

import logging
from typing import Any

from . import gpu_topology as topo
from .gpu_imex import read_imex
from .gpu_nvml import (
    call,
    clock_event_reasons,
    due,
    fabric,
    gpu_class,
    memory_temperature,
    pci_key,
    session,
    text,
)
from .registry import Roots, collector
from .xid_log import gpu_xids

log = logging.getLogger("llmgw_agent.gpu")

_NVLINK_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))


def _devices(nvml: Any) -> list[tuple[int, Any, str | None, str | None]]:
    """(index, handle or None when lost, uuid, pci bus id) for every GPU NVML counts."""
    n = call(nvml, "nvmlDeviceGetCount") or 0
    out: list[tuple[int, Any, str | None, str | None]] = []
    for i in range(int(n)):
        h = call(nvml, "nvmlDeviceGetHandleByIndex", i)
        if h is None:
            out.append((i, None, None, None))
            continue
        pci = call(nvml, "nvmlDeviceGetPciInfo", h)
        bus = text(getattr(pci, "busId", None)) if pci is not None else None
        out.append((i, h, text(call(nvml, "nvmlDeviceGetUUID", h)), bus))
    return out


def _put(entry: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        entry[key] = value


def _ecc_uncorrected(nvml: Any, h: Any) -> int | None:
    value = call(
        nvml, "nvmlDeviceGetTotalEccErrors", h,
        getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
        getattr(nvml, "NVML_VOLATILE_ECC", 0),
    )  # fmt: skip
    return int(value) if value is not None else None


def _foreign_processes(roots: Roots, nvml: Any, h: Any) -> int | None:
    procs = call(nvml, "nvmlDeviceGetComputeRunningProcesses", h)
    if procs is None:
        return None
    own: set[int] = set(roots.memo.get("gpu.own_pids") or ())
    return sum(1 for p in procs if int(getattr(p, "pid", -1)) not in own)


@collector("gpu_inventory", part="register")
def collect_inventory(roots: Roots) -> dict[str, Any]:
    """gpus (what each card is and where it sits), gpu_topology, imex."""
    nvml = session(roots)
    if nvml is None:
        return {}
    devices = _devices(nvml)
    nics = topo.adapters(roots.sys)

    def nic_numa(name: str) -> int | None:
        path = nics.get(name)
        return topo.numa_node(roots.sys, path[-1]) if path else None

    gpus: list[dict[str, Any]] = []
    paths: list[list[str] | None] = []
    numas: list[int | None] = []
    for index, h, uuid, bus in devices:
        entry: dict[str, Any] = {"index": index, "uuid": uuid}
        path = topo.pci_path(roots.sys / "bus/pci/devices" / pci_key(bus)) if bus else None
        numa = topo.numa_node(roots.sys, bus) if bus else None
        paths.append(path)
        numas.append(numa)
        if h is None:
            entry["error"] = "lost"
            gpus.append(entry)
            continue
        name = text(call(nvml, "nvmlDeviceGetName", h))
        mem = call(nvml, "nvmlDeviceGetMemoryInfo", h)
        total = int(mem.total) if mem is not None else None
        entry.update(name=name, **{"class": gpu_class(name, total)})
        entry.update(memory_total_bytes=total, pci_bus_id=pci_key(bus) if bus else None)
        entry["numa_node"] = numa
        entry["nearest_adapter"] = topo.nearest_adapter(path, numa, nics, nic_numa)
        entry["ecc_uncorrected"] = _ecc_uncorrected(nvml, h)
        entry["foreign_processes"] = _foreign_processes(roots, nvml, h)
        _put(entry, "fabric", fabric(nvml, h))
        gpus.append(entry)
    if not gpus:
        return {}
    out: dict[str, Any] = {"gpus": gpus}
    topology = _topology(roots, nvml, devices, paths, numas)
    if topology is not None:
        out["gpu_topology"] = topology
    imex = read_imex(roots)
    if imex is not None:
        out["imex"] = imex
    return out


def _topology(
    roots: Roots,
    nvml: Any,
    devices: list[tuple[int, Any, str | None, str | None]],
    paths: list[list[str] | None],
    numas: list[int | None],
) -> dict[str, Any] | None:
    live = [(i, h, u, b) for i, h, u, b in devices if h is not None and b is not None]
    if len(live) < 2 or len(live) != len(devices):
        return None
    handles = [h for _, h, _, _ in live]
    links = topo.nvlink_counts(nvml, handles, [b for _, _, _, b in live if b])

    def level(i: int, j: int) -> int | None:
        lv = call(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
        if lv is not None:
            return int(lv)
        a, b = paths[i], paths[j]
        return topo.pci_level(a, b, numas[i], numas[j]) if a and b else None

    grid = topo.matrix(len(live), level, links)
    if all(cell in ("X", None) for row in grid for cell in row):
        return None
    return {"gpus": [u for _, _, u, _ in live], "matrix": grid}


def _minute(roots: Roots, nvml: Any, h: Any, entry: dict[str, Any]) -> None:
    rows = call(nvml, "nvmlDeviceGetRemappedRows", h)
    # N/A under MIG (NotSupported): null, i.e. "asked, the card cannot say".
    entry["remapped_rows"] = (
        None
        if rows is None
        else {"correctable": int(rows[0]), "uncorrectable": int(rows[1]),
              "pending": bool(rows[2]), "failed": bool(rows[3])}
    )  # fmt: skip
    _put(entry, "pcie_replays", call(nvml, "nvmlDeviceGetPcieReplayCounter", h))
    links: list[dict[str, Any]] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        if call(nvml, "nvmlDeviceGetNvLinkState", h, link) != getattr(
            nvml, "NVML_FEATURE_ENABLED", 1
        ):
            continue
        counters: dict[str, Any] = {"link": link}
        for name, counter in _NVLINK_COUNTERS:
            _put(counters, name, call(nvml, "nvmlDeviceGetNvLinkErrorCounter", h, link, counter))
        links.append(counters)
    if links:
        entry["nvlink_errors"] = links
    _put(entry, "fabric", fabric(nvml, h))


@collector("gpus")
def collect_gpus(roots: Roots) -> dict[str, Any]:
    """Per-GPU samples for the heartbeat; see the module docstring for the cadence."""
    nvml = session(roots)
    if nvml is None:
        return {}
    devices = _devices(nvml)
    if not devices:
        return {}
    thermal = due(roots, "gpu.thermal_at", 10)
    minute = due(roots, "gpu.minute_at", 60)
    xids: dict[str, dict[int, int]] | None = None
    out: dict[str, Any] = {}
    if minute:
        xids, extra = gpu_xids(roots, nvml, devices)
        out.update(extra)
    gpus: list[dict[str, Any]] = []
    for index, h, uuid, bus in devices:
        entry: dict[str, Any] = {"index": index, "uuid": uuid}
        if h is None:
            entry["error"] = "lost"
            gpus.append(entry)
            continue
        util = call(nvml, "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            entry["utilization_percent"] = int(util.gpu)
            entry["memory_bandwidth_percent"] = int(util.memory)
        mem = call(nvml, "nvmlDeviceGetMemoryInfo", h)
        _put(entry, "memory_used_bytes", int(mem.used) if mem is not None else None)
        sm = call(nvml, "nvmlDeviceGetClockInfo", h, getattr(nvml, "NVML_CLOCK_SM", 1))
        _put(entry, "sm_clock_mhz", sm)
        _put(entry, "ecc_uncorrected", _ecc_uncorrected(nvml, h))
        if thermal:
            temp = call(
                nvml, "nvmlDeviceGetTemperature", h, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
            )
            _put(entry, "temperature_c", temp)
            _put(entry, "memory_temperature_c", memory_temperature(nvml, h))
            mw = call(nvml, "nvmlDeviceGetPowerUsage", h)
            _put(entry, "power_draw_w", round(mw / 1000, 3) if mw is not None else None)
            lim = call(nvml, "nvmlDeviceGetEnforcedPowerLimit", h)
            _put(entry, "power_limit_w", round(lim / 1000, 3) if lim is not None else None)
            _put(entry, "clock_event_reasons", clock_event_reasons(nvml, h))
        if minute:
            _minute(roots, nvml, h, entry)
            if xids is not None:
                mine = xids.get(pci_key(bus, with_function=False), {}) if bus else {}
                entry["xids"] = {str(c): n for c, n in sorted(mine.items())}
        gpus.append(entry)
    out["gpus"] = gpus
    return out
