"""A fake pynvml whose every answer comes from a real `nvidia-smi -q` capture.

The captures live in tests/data/realdata/ (first line: where each came from). A value a
capture lacks is not made up: the function raises NVMLError_NotSupported, as NVML does
for a field a card cannot report. Exceptions and constants are pynvml's own.

Traps the captures hold: "Clocks Event Reasons" (R535+) was "Clocks Throttle Reasons"
before (both parsed; the Throttle name only offers the Throttle function); Remapped
Rows is the single value "N/A" under MIG; H100/H200 print a Fabric section with an
all-zero ClusterUUID and CliqueId 0; the 535.183.01 capture is truncated and prefixes
some keys with "Invalid"; the GH200 counts 1 aggregate uncorrectable ECC error and 0
volatile ones.
"""

from __future__ import annotations

import re
import uuid as uuidlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

REALDATA = Path(__file__).resolve().parents[1] / "data" / "realdata"
MIB = 2**20

# nvidia-smi's names for the nvmlClocksEventReason* bits (text, then -q -x tag suffix).
REASON_BITS = {
    "Idle": 0x1, "gpu_idle": 0x1,
    "Applications Clocks Setting": 0x2, "applications_clocks_setting": 0x2,
    "SW Power Cap": 0x4, "sw_power_cap": 0x4,
    "HW Slowdown": 0x8, "hw_slowdown": 0x8,
    "Sync Boost": 0x10, "sync_boost": 0x10,
    "SW Thermal Slowdown": 0x20, "sw_thermal_slowdown": 0x20,
    "HW Thermal Slowdown": 0x40, "hw_thermal_slowdown": 0x40,
    "HW Power Brake Slowdown": 0x80, "hw_power_brake_slowdown": 0x80,
    "Display Clock Setting": 0x100, "display_clocks_setting": 0x100,
}  # fmt: skip
FABRIC_STATE = {"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
FABRIC_STATUS = {"Success": 0, "Insufficient Resources": 23}
HEALTH_SUMMARY = {"Not Supported": 0, "Healthy": 1, "Unhealthy": 2, "Limited Capacity": 3}
BANDWIDTH_MASK = {"Full": 2, "Degraded": 1}  # NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_*


def not_supported() -> pynvml.NVMLError:
    return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def need(value: Any) -> Any:
    if value is None:
        raise not_supported()
    return value


# --- nvidia-smi -q text ----------------------------------------------------------------


def parse_tree(lines: list[str]) -> dict[str, Any]:
    """Indentation-based `Key : value` sections into nested dicts.

    A `key : value` line may itself have deeper lines under it ("HW Slowdown : Active"
    then "HW Thermal Slowdown"); those go into the same section.
    """
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for raw in lines:
        line = raw.rstrip()
        if not line.strip() or line.strip() in ("[...]", "--") or line.lstrip().startswith("#"):
            continue
        if line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        # "Key<spaces>: value"; a bare "GPU 00000000:19:00.0" (colons, no " :") is a section.
        kv = re.match(r"^(.+?)\s+:(?:\s+(.*))?$", line.strip())
        here = stack[-1][1]
        if kv:
            here[kv.group(1).strip()] = (kv.group(2) or "").strip()
            stack.append((indent, here))
        else:
            section: dict[str, Any] = {}
            here[line.strip()] = section
            stack.append((indent, section))
    return root


def num(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    return float(m.group(1)) if m else None


def inum(value: Any) -> int | None:
    n = num(value)
    return int(n) if n is not None else None


@dataclass
class Card:
    bus_id: str
    name: str | None = None
    uuid: str | None = None
    mem_total: int | None = None
    mem_used: int | None = None
    mem_free: int | None = None
    util_gpu: int | None = None
    util_mem: int | None = None
    sm_clock: int | None = None
    ecc_volatile_unc: int | None = None
    ecc_aggregate_unc: int | None = None
    temp_gpu: int | None = None
    temp_mem: int | None = None
    power_mw: int | None = None
    limit_mw: int | None = None
    reasons: int | None = None
    reasons_api: str = "event"
    remapped: tuple[int, int, int, int] | None = None
    replays: int | None = None
    fabric: dict[str, Any] | None = None
    processes: list[int] | None = None
    xids: list[int] = field(default_factory=list)


def _sum_unc(section: Any) -> int | None:
    if not isinstance(section, dict):
        return None
    values = [inum(v) for k, v in section.items() if "Uncorrectable" in k]
    return sum(v for v in values if v is not None) if values and None not in values else None


def _reasons(tree: dict[str, Any]) -> tuple[int | None, str]:
    for title, api in (("Clocks Event Reasons", "event"), ("Clocks Throttle Reasons", "throttle")):
        section = tree.get(title)
        if isinstance(section, dict):
            if any(k not in REASON_BITS for k in section):
                return None, api  # "Invalid HW Slowdown": a bit the capture cannot say
            mask = sum(REASON_BITS[k] for k, v in section.items() if v == "Active")
            return mask, api
    return None, "event"


def fabric_from_text(section: Any) -> dict[str, Any] | None:
    """A Fabric section as the fields NVML's fabric structs carry (None where absent)."""
    if not isinstance(section, dict) or section.get("State") in (None, "N/A"):
        return None
    health = section.get("Health") if isinstance(section.get("Health"), dict) else {}
    out: dict[str, Any] = {"state": FABRIC_STATE[section["State"]]}
    if section.get("Status") in FABRIC_STATUS:
        out["status"] = FABRIC_STATUS[section["Status"]]
    if "CliqueId" in section:
        out["cliqueId"] = inum(section["CliqueId"])
    if "ClusterUUID" in section:
        out["clusterUuid"] = uuidlib.UUID(section["ClusterUUID"]).bytes
    if health.get("Bandwidth") in BANDWIDTH_MASK:
        out["healthMask"] = BANDWIDTH_MASK[health["Bandwidth"]]
    elif health.get("Bandwidth") == "N/A":
        out["healthMask"] = 0
    if health.get("Summary") in HEALTH_SUMMARY:
        out["healthSummary"] = HEALTH_SUMMARY[health["Summary"]]
    return out


def card_from_tree(bus_id: str, t: dict[str, Any]) -> Card:
    def sec(name: str) -> dict[str, Any]:
        value = t.get(name)
        return value if isinstance(value, dict) else {}

    fb, util, clocks, temp = (
        sec("FB Memory Usage"),
        sec("Utilization"),
        sec("Clocks"),
        sec("Temperature"),
    )
    power = sec("GPU Power Readings") or sec("Power Readings")
    ecc = sec("ECC Errors")
    c = Card(bus_id=sec("PCI").get("Bus Id", bus_id), name=t.get("Product Name"))
    c.uuid = t.get("GPU UUID")
    c.mem_total = inum(fb.get("Total")) * MIB if inum(fb.get("Total")) is not None else None
    c.mem_used = inum(fb.get("Used")) * MIB if inum(fb.get("Used")) is not None else None
    c.mem_free = inum(fb.get("Free")) * MIB if inum(fb.get("Free")) is not None else None
    c.util_gpu, c.util_mem = inum(util.get("Gpu")), inum(util.get("Memory"))
    c.sm_clock = inum(clocks.get("SM"))
    c.ecc_volatile_unc = _sum_unc(ecc.get("Volatile"))
    c.ecc_aggregate_unc = _sum_unc(ecc.get("Aggregate"))
    c.temp_gpu = inum(temp.get("GPU Current Temp"))
    c.temp_mem = inum(temp.get("Memory Current Temp"))
    draw = num(power.get("Power Draw"))
    c.power_mw = round(draw * 1000) if draw is not None else None
    limit = num(power.get("Current Power Limit", power.get("Enforced Power Limit")))
    c.limit_mw = round(limit * 1000) if limit is not None else None
    c.reasons, c.reasons_api = _reasons(t)
    rows = t.get("Remapped Rows")
    if isinstance(rows, dict):
        c.remapped = (
            int(num(rows["Correctable Error"]) or 0),
            int(num(rows["Uncorrectable Error"]) or 0),
            int(rows["Pending"] == "Yes"),
            int(rows["Remapping Failure Occurred"] == "Yes"),
        )
    c.replays = inum(sec("PCI").get("Replays Since Reset"))
    c.fabric = fabric_from_text(t.get("Fabric"))
    procs = t.get("Processes")
    c.processes = [] if procs == "None" else None
    return c


def load_smi_q(name: str) -> list[Card]:
    """Every GPU of a `nvidia-smi -q` capture, with its kernel XID lines if it has any."""
    text = (REALDATA / name).read_text()
    tree = parse_tree(text.splitlines()[1:])
    cards = [card_from_tree(k[4:], v) for k, v in tree.items() if k.startswith("GPU ")]
    for m in re.finditer(r"NVRM: Xid \(PCI:(\w+):(\w+):(\w+)\): (\d+)", text):
        for c in cards:
            _dom, bus, dev = c.bus_id.lower().split(":")
            if (bus, dev.split(".")[0]) == (m.group(2).lower(), m.group(3).lower()):
                c.xids.append(int(m.group(4)))
    return cards


def load_smi_xml(name: str) -> list[Card]:
    """`nvidia-smi -q -x`: same fields, XML tags (the capture's first line is its source)."""
    text = (REALDATA / name).read_text()
    root = ET.fromstring(text.split("\n", 1)[1].lstrip())
    cards = []
    for g in root.iter("gpu"):

        def get(path: str, g: ET.Element = g) -> str | None:
            el = g.find(path)
            return el.text.strip() if el is not None and el.text else None

        c = Card(bus_id=get("pci/pci_bus_id") or g.get("id", ""), name=get("product_name"))
        c.uuid = get("uuid")
        for attr, path in (("mem_total", "fb_memory_usage/total"),
                           ("mem_used", "fb_memory_usage/used"),
                           ("mem_free", "fb_memory_usage/free")):  # fmt: skip
            value = inum(get(path))
            setattr(c, attr, value * MIB if value is not None else None)
        c.util_gpu, c.util_mem = (
            inum(get("utilization/gpu_util")),
            inum(get("utilization/memory_util")),
        )
        c.sm_clock = inum(get("clocks/sm_clock"))
        vol = [inum(get(f"ecc_errors/volatile/{k}_uncorrectable")) for k in ("sram", "dram")]
        c.ecc_volatile_unc = sum(v for v in vol if v is not None) if None not in vol else None
        c.temp_gpu, c.temp_mem = (
            inum(get("temperature/gpu_temp")),
            inum(get("temperature/memory_temp")),
        )
        draw, limit = (
            num(get("gpu_power_readings/power_draw")),
            num(get("gpu_power_readings/current_power_limit")),
        )
        c.power_mw = round(draw * 1000) if draw is not None else None
        c.limit_mw = round(limit * 1000) if limit is not None else None
        for tag, api in (
            ("clocks_event_reasons", "event"),
            ("clocks_throttle_reasons", "throttle"),
        ):
            el = g.find(tag)
            if el is not None:
                c.reasons_api = api
                c.reasons = sum(
                    REASON_BITS[child.tag.split("_reason_", 1)[1]]
                    for child in el
                    if (child.text or "").strip() == "Active"
                )
        c.replays = inum(get("pci/replay_counter"))
        # <remapped_rows>N/A</remapped_rows> under MIG: NotSupported, c.remapped stays None.
        state = get("fabric/state")
        if state and state != "N/A":
            c.fabric = fabric_from_text({"State": state, "Status": get("fabric/status")})
        procs = g.find("processes")
        c.processes = [] if procs is not None and len(procs) == 0 else None
        cards.append(c)
    return cards


def load_gb200_fabrics() -> dict[str, Card]:
    """The GB200 snippets: "unhealthy" (Completed/Success, Health Unhealthy),
    "insufficient_resources", and "not_supported" (gpud's NVML table)."""
    text = (REALDATA / "nvidia-smi-q-fabric-GB200-snippets.txt").read_text()
    blocks = re.split(r"^# SOURCE \d+:.*$", text, flags=re.MULTILINE)[1:]
    out: dict[str, Card] = {}
    for key, block in zip(("unhealthy", "insufficient_resources"), blocks[:2], strict=True):
        tree = parse_tree(block.splitlines())
        out[key] = Card(bus_id="", fabric=fabric_from_text(tree["Fabric"]))
    rows = dict(
        (cell.strip() for cell in line.strip().strip("|").split("|", 1))
        for line in blocks[2].splitlines()
        if line.startswith("|")
    )
    fab: dict[str, Any] = {"state": FABRIC_STATE[rows["State"]]}
    fab["status"], fab["cliqueId"] = FABRIC_STATUS[rows["Status"]], int(rows["Clique ID"])
    fab["healthSummary"] = HEALTH_SUMMARY[rows["Health Summary"]]
    out["not_supported"] = Card(bus_id="", uuid=rows["GPU UUID"], fabric=fab)
    return out


# --- the module ----------------------------------------------------------------------


class FabricInfo:
    """Stands for pynvml's c_nvmlGpuFabricInfo* structs: a field the capture lacks stays
    None, which the collector treats as absent."""

    def __init__(self) -> None:
        self.clusterUuid: bytes | None = None
        self.status: int | None = None
        self.cliqueId: int | None = None
        self.state: int | None = None
        self.healthMask: int | None = None
        self.healthSummary: int | None = None


class FakeNvml:
    """Answers pynvml's calls from `cards`. `present=False`: a node with no driver."""

    c_nvmlGpuFabricInfo_v3_t = FabricInfo
    c_nvmlGpuFabricInfo_v2_t = FabricInfo
    c_nvmlGpuFabricInfo_t = FabricInfo

    def __init__(self, cards: list[Card], present: bool = True) -> None:
        self.cards = cards
        self.present = present
        self.registered: set[int] = set()
        self.queue: list[SimpleNamespace] = []
        for name in dir(pynvml):
            if name.startswith(("NVML", "nvmlEventType", "nvmlClocks")):
                setattr(self, name, getattr(pynvml, name))

    def __getattr__(self, name: str) -> Any:
        # Anything the captures cannot answer (NVLink, topology, ...): NotSupported.
        if name.startswith("nvml"):

            def unsupported(*_: Any) -> Any:
                raise not_supported()

            return unsupported
        raise AttributeError(name)

    @staticmethod
    def byref(obj: Any) -> Any:
        return obj

    def nvmlInit(self) -> None:
        if not self.present:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Card:
        return self.cards[i]

    def nvmlDeviceGetName(self, c: Card) -> str:
        return str(need(c.name))

    def nvmlDeviceGetUUID(self, c: Card) -> str:
        return str(need(c.uuid))

    def nvmlDeviceGetPciInfo(self, c: Card) -> SimpleNamespace:
        return SimpleNamespace(busId=need(c.bus_id or None))

    def nvmlDeviceGetMemoryInfo(self, c: Card) -> SimpleNamespace:
        return SimpleNamespace(total=need(c.mem_total), used=need(c.mem_used), free=c.mem_free)

    def nvmlDeviceGetUtilizationRates(self, c: Card) -> SimpleNamespace:
        return SimpleNamespace(gpu=need(c.util_gpu), memory=need(c.util_mem))

    def nvmlDeviceGetClockInfo(self, c: Card, kind: int) -> int:
        return int(need(c.sm_clock if kind == pynvml.NVML_CLOCK_SM else None))

    def nvmlDeviceGetTotalEccErrors(self, c: Card, error_type: int, counter: int) -> int:
        if error_type != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            raise not_supported()
        return int(need(c.ecc_volatile_unc if counter == pynvml.NVML_VOLATILE_ECC
                        else c.ecc_aggregate_unc))  # fmt: skip

    def nvmlDeviceGetComputeRunningProcesses(self, c: Card) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=None) for p in need(c.processes)]

    def nvmlDeviceGetTemperature(self, c: Card, sensor: int) -> int:
        return int(need(c.temp_gpu if sensor == pynvml.NVML_TEMPERATURE_GPU else None))

    def nvmlDeviceGetFieldValues(self, c: Card, ids: list[int]) -> list[SimpleNamespace]:
        out = []
        for fid in ids:
            value = c.temp_mem if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP else None
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    nvmlReturn=0 if value is not None else pynvml.NVML_ERROR_NOT_SUPPORTED,
                    valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                    value=SimpleNamespace(uiVal=value),
                )
            )
        return out

    def nvmlDeviceGetPowerUsage(self, c: Card) -> int:
        return int(need(c.power_mw))

    def nvmlDeviceGetEnforcedPowerLimit(self, c: Card) -> int:
        return int(need(c.limit_mw))

    def nvmlDeviceGetCurrentClocksEventReasons(self, c: Card) -> int:
        if c.reasons_api != "event":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return int(need(c.reasons))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, c: Card) -> int:
        return int(need(c.reasons))

    def nvmlDeviceGetRemappedRows(self, c: Card) -> tuple[int, int, int, int]:
        return need(c.remapped)  # type: ignore[no-any-return]

    def nvmlDeviceGetPcieReplayCounter(self, c: Card) -> int:
        return int(need(c.replays))

    def _fill(self, c: Card, info: FabricInfo) -> None:
        for key, value in need(c.fabric).items():
            setattr(info, key, value)

    def nvmlDeviceGetGpuFabricInfoV(self, c: Card, info: FabricInfo) -> int:
        self._fill(c, info)
        return 0

    def nvmlDeviceGetGpuFabricInfo(self, c: Card, info: FabricInfo) -> int:
        self._fill(c, info)
        return 0

    # XID events: a card's XIDs from its capture's kernel lines, delivered once registered.
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, c: Card, types: int, _set: object) -> None:
        if types & pynvml.nvmlEventTypeXidCriticalError and id(c) not in self.registered:
            self.registered.add(id(c))
            self.queue.extend(
                SimpleNamespace(device=c, eventType=pynvml.nvmlEventTypeXidCriticalError,
                                eventData=x)
                for x in c.xids
            )  # fmt: skip

    def nvmlEventSetWait(self, _set: object, timeout_ms: int) -> SimpleNamespace:
        if not self.queue:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return self.queue.pop(0)


def fake(*cards: Card, present: bool = True) -> FakeNvml:
    return FakeNvml(list(cards), present=present)
