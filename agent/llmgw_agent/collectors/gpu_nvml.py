"""NVML for the GPU collectors: one session per agent, every call made safe, and the
decoders that turn NVML's numbers into the names the payload carries.

Unknown is never zero: a call NVML cannot answer (NVMLError_NotSupported, a GPU that is
lost, a function this libnvidia-ml lacks) gives None and the field stays out of the
payload.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .registry import Roots

log = logging.getLogger("llmgw_agent.gpu")

_SESSION = "gpu.nvml"
_INIT_LOGGED = "gpu.nvml_init_logged"
# A heartbeat every 10 s arrives a hair early as often as late; without slack a "10 s"
# reading would be taken every other heartbeat, i.e. every 20 s.
SLACK_S = 0.5


def now(roots: Roots) -> float:
    """Monotonic seconds; tests put a callable under memo["clock"]."""
    clock = roots.memo.get("clock")
    return float(clock()) if callable(clock) else time.monotonic()


def due(roots: Roots, key: str, period_s: float) -> bool:
    """True, and the time noted, when `period_s` has passed since `key` was last due."""
    t = now(roots)
    last = roots.memo.get(key)
    if last is not None and t - float(last) < period_s - SLACK_S:
        return False
    roots.memo[key] = t
    return True


def session(roots: Roots) -> Any | None:
    """The initialised NVML module, or None when this node has no NVIDIA driver.

    nvmlInit raises NVMLError_LibraryNotFound without a driver (DriverNotLoaded with a
    library but no kernel module). Either way the GPU collectors report nothing. A failed
    init is not remembered: a driver installed later is picked up at the next heartbeat.
    """
    if _SESSION in roots.memo:
        return roots.memo[_SESSION]
    factory: Callable[[], Any]
    if roots.nvml is not None:
        factory = roots.nvml
    elif roots.proc == Path("/proc"):
        factory = _import_pynvml
    else:
        return None
    try:
        nvml = factory()
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - any failure means "no NVML", never a crash
        if not roots.memo.get(_INIT_LOGGED):
            roots.memo[_INIT_LOGGED] = True
            log.info("no NVML (%s: %s): GPUs are not reported", type(exc).__name__, exc)
        return None
    roots.memo[_SESSION] = nvml
    return nvml


def _import_pynvml() -> Any:
    return importlib.import_module("pynvml")


def call(nvml: Any, name: str, *args: Any) -> Any | None:
    """nvml.<name>(*args), or None when NVML cannot say."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def text(value: Any) -> str | None:
    """pynvml gives str or bytes depending on its version."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def pci_key(bus_id: str, with_function: bool = True) -> str:
    """NVML's "00000000:19:00.0" as sysfs names it, "0000:19:00.0" (4-digit domain, lower).

    Without the function it is the kernel log's form: "NVRM: Xid (PCI:0000:19:00)".
    """
    s = bus_id.strip().lower()
    if s.startswith("pci:"):
        s = s[4:]
    parts = s.split(":")
    if len(parts) == 2:  # no domain
        parts = ["0000", *parts]
    domain, bus, devfn = parts[-3], parts[-2], parts[-1]
    domain = domain[-4:].rjust(4, "0")
    dev, _, fn = devfn.partition(".")
    out = f"{domain}:{bus.rjust(2, '0')}:{dev.rjust(2, '0')}"
    return f"{out}.{fn or '0'}" if with_function else out


# --- GPU class ------------------------------------------------------------------------

# Sizes the cards are sold by. NVML's total is what is left after the driver's
# reservations, in bytes: an H200 shows 143771 MiB (140.4 GiB) and is an H200-141GB.
_MARKETED_GB = (16, 24, 32, 40, 48, 64, 80, 94, 96, 141, 144, 180, 186, 192, 288)
_FAMILY = re.compile(r"\b([A-Z]{1,3}\d{1,4}[A-Z]?)\b")
_NAME_GB = re.compile(r"(\d+)\s?GB\b")


def gpu_class(name: str | None, memory_total_bytes: int | None) -> str | None:
    """The GPU class placement matches profiles on: "<family>-<memory>GB".

    The family is the first model token of the name with "NVIDIA " dropped ("NVIDIA H100
    80GB HBM3" -> H100, "NVIDIA A100-SXM4-80GB" -> A100, "NVIDIA GH200 480GB" -> GH200);
    a name with no such token (GeForce RTX 4090) is used whole, spaces as dashes.
    The memory is NVML's total snapped to the nearest marketed size within 7 %
    (H100 81559 MiB -> 80, H200 143771 MiB -> 141, GH200 97871 MiB -> 96, GB200 -> 186),
    else rounded GiB. Without a total, a size in the name is used, except for the
    superchips (GH200, GB200), whose name counts the CPU's memory too ("GH200 480GB").
    No name: None.
    """
    if not name:
        return None
    bare = name.removeprefix("NVIDIA ").strip()
    match = _FAMILY.search(bare)
    family = match.group(1) if match else "-".join(bare.split())
    gb: int | None = None
    if memory_total_bytes:
        gib = memory_total_bytes / 2**30
        nearest = min(_MARKETED_GB, key=lambda m: abs(m - gib))
        gb = nearest if abs(nearest - gib) <= 0.07 * nearest else round(gib)
    elif not family.startswith(("GH", "GB")):
        in_name = _NAME_GB.search(bare)
        gb = int(in_name.group(1)) if in_name else None
    return f"{family}-{gb}GB" if gb else family


# --- clock event (throttle) reasons -----------------------------------------------------

# nvmlClocksEventReason* bits; R535 renamed "throttle" to "event", same bits.
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def clock_event_reasons(nvml: Any, handle: Any) -> list[str] | None:
    """Active reasons by name. Drivers before R535 only have the "Throttle" function."""
    mask = call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if mask is None:
        mask = call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if mask is None:
        return None
    return [name for bit, name in CLOCK_EVENT_REASONS if int(mask) & bit]


# --- GPU fabric (multi-node NVLink) -----------------------------------------------------

FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
_HEALTH_SUMMARY = {1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
# The status is an nvmlReturn_t; nvidia-smi prints nvmlErrorString of it.
_STATUS = {0: "success", 3: "not_supported", 23: "insufficient_resources", 999: "unknown"}
_BANDWIDTH = {1: "degraded", 2: "full"}  # NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_*
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def _fabric_struct(nvml: Any, handle: Any) -> Any | None:
    """The richest fabric struct this driver fills: V with v3 (health summary), V with v2
    (health mask), then the v1 call (state, status, clique, cluster only)."""
    fn_v = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    for struct in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
        cls = getattr(nvml, struct, None)
        if fn_v is None or cls is None:
            break
        info = cls()
        try:
            fn_v(handle, nvml.byref(info))
            return info
        except nvml.NVMLError as exc:
            # An older driver refuses a newer struct version; try the next one.
            if type(exc).__name__ not in ("NVMLError_ArgumentVersionMismatch",):
                if type(exc).__name__ == "NVMLError_FunctionNotFound":
                    break
                return None
    cls = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    fn = getattr(nvml, "nvmlDeviceGetGpuFabricInfo", None)
    if cls is None or fn is None:
        return None
    info = cls()
    try:
        fn(handle, nvml.byref(info))
    except nvml.NVMLError:
        return None
    return info


def fabric(nvml: Any, handle: Any) -> dict[str, Any] | None:
    """state, status, cluster_uuid, clique_id, multi_node, bandwidth, health.

    None when NVML cannot say (nvidia-smi prints "N/A": A100, GH200 here). A field the
    driver's struct lacks is absent. cluster_uuid all zero (H100/H200 with NVSwitch
    inside one box) means no multi-node NVLink domain: multi_node false.
    """
    info = _fabric_struct(nvml, handle)
    if info is None:
        return None
    out: dict[str, Any] = {}
    state = getattr(info, "state", None)
    if state is not None:
        out["state"] = FABRIC_STATES.get(int(state), f"unknown_{int(state)}")
    status = getattr(info, "status", None)
    if status is not None:
        out["status"] = _STATUS.get(int(status), f"nvml_error_{int(status)}")
    raw = getattr(info, "clusterUuid", None)
    if raw is not None:
        cluster = str(uuid.UUID(bytes=bytes(bytearray(raw)[:16])))
        out["cluster_uuid"] = cluster
        out["multi_node"] = cluster != _ZERO_UUID
    clique = getattr(info, "cliqueId", None)
    if clique is not None:
        out["clique_id"] = int(clique)
    mask = getattr(info, "healthMask", None)
    if mask is not None and int(mask) & 0x3 in _BANDWIDTH:
        out["bandwidth"] = _BANDWIDTH[int(mask) & 0x3]
    summary = getattr(info, "healthSummary", None)
    if summary is not None and int(summary) in _HEALTH_SUMMARY:
        out["health"] = _HEALTH_SUMMARY[int(summary)]
    return out


def memory_temperature(nvml: Any, handle: Any) -> float | None:
    """HBM temperature from field NVML_FI_DEV_MEMORY_TEMP; None when unsupported.

    Some boards answer 0 rather than "not supported"; 0 C is no HBM reading, so None.
    """
    fid = getattr(nvml, "NVML_FI_DEV_MEMORY_TEMP", None)
    values = call(nvml, "nvmlDeviceGetFieldValues", handle, [fid]) if fid is not None else None
    if not values:
        return None
    v = values[0]
    if int(getattr(v, "nvmlReturn", 1)) != 0:
        return None
    kind = int(getattr(v, "valueType", 1))
    # nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(
        kind, "uiVal"
    )
    reading = getattr(v.value, attr, None)
    if reading is None or float(reading) <= 0:
        return None
    return float(reading)
