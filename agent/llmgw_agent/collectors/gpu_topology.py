"""Where each GPU sits: NUMA node, nearest network adapter, and the GPU-by-GPU matrix
in the words of `nvidia-smi topo -m` ("X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS").

NVML's nvmlDeviceGetTopologyCommonAncestor takes two GPU handles only, so for network
adapters the same levels are worked out from the PCI paths in sysfs, as nvidia-smi does:
/sys/bus/pci/devices/<bus id> links to /sys/devices/pci<root>/<bridge>/.../<device>.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .gpu_nvml import call, pci_key, text
from .procfs import read_text

# nvmlGpuTopologyLevel_t values, and what nvidia-smi topo -m prints for them.
PIX, PXB, PHB, NODE, SYS = 10, 20, 30, 40, 50
LEVEL_NAMES = {0: "PIX", PIX: "PIX", PXB: "PXB", PHB: "PHB", NODE: "NODE", SYS: "SYS"}
_NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


def numa_node(sys: Path, bus_id: str) -> int | None:
    """<sys>/bus/pci/devices/<bus id>/numa_node; the kernel's -1 (no NUMA) is None."""
    raw = read_text(sys / "bus" / "pci" / "devices" / pci_key(bus_id) / "numa_node")
    try:
        node = int(raw.strip()) if raw is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def pci_path(dev: Path) -> list[str] | None:
    """The components under /sys/devices, from the host bridge ("pci0000:15") down."""
    try:
        real = Path(os.path.realpath(dev))
    except OSError:
        return None
    parts = real.parts
    for i, part in enumerate(parts):
        if part.startswith("pci") and ":" in part and i > 0 and parts[i - 1] == "devices":
            return list(parts[i:])
    return None


def pci_level(a: Sequence[str], b: Sequence[str], numa_a: int | None, numa_b: int | None) -> int:
    """The nvmlGpuTopologyLevel_t two PCI paths are apart.

    PIX: at most one bridge on each side below the deepest common bridge (one switch);
    PXB: more bridges, same host bridge not crossed; PHB: only the host bridge in common;
    NODE: different host bridges on one NUMA node (both unknown counts as one node);
    SYS: across NUMA nodes.
    """
    if not a or not b or a[0] != b[0]:
        return NODE if numa_a == numa_b else SYS
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common <= 1:
        return PHB
    below = max(len(a) - common - 1, len(b) - common - 1)
    return PIX if below <= 1 else PXB


def adapters(sys: Path) -> dict[str, list[str]]:
    """RDMA adapters (<sys>/class/infiniband/*/device) by name, with their PCI paths."""
    out: dict[str, list[str]] = {}
    base = sys / "class" / "infiniband"
    try:
        names = sorted(p.name for p in base.iterdir())
    except OSError:
        return out
    for name in names:
        path = pci_path(base / name / "device")
        if path is not None:
            out[name] = path
    return out


def nearest_adapter(
    gpu_path: list[str] | None,
    gpu_numa: int | None,
    nics: dict[str, list[str]],
    nic_numa: Callable[[str], int | None],
) -> dict[str, Any] | None:
    """{"name", "level"} of the adapter closest to the GPU (ties: first by name)."""
    if gpu_path is None or not nics:
        return None
    best = min(
        ((pci_level(gpu_path, path, gpu_numa, nic_numa(name)), name) for name, path in nics.items())
    )
    return {"name": best[1], "level": LEVEL_NAMES[best[0]]}


def nvlink_counts(
    nvml: Any, handles: Sequence[Any], bus_ids: Sequence[str]
) -> dict[tuple[int, int], int] | None:
    """Active NVLinks between each pair of GPUs; None when NVML has no NVLink to tell of.

    A link whose far end is another GPU counts for that pair. On NVSwitch systems (DGX/HGX
    H100, GB200 trays) every link ends on a switch; two GPUs then reach each other over
    min(their switch links), as nvidia-smi prints NV18 on an H100 box, when NVML's P2P
    status over NVLink is OK for the pair (or unknown).
    """
    n = len(handles)
    index = {pci_key(b): i for i, b in enumerate(bus_ids)}
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    direct: dict[tuple[int, int], int] = {}
    to_switch = [0] * n
    known = False
    for i, h in enumerate(handles):
        for link in range(max_links):
            state = call(nvml, "nvmlDeviceGetNvLinkState", h, link)
            if state is None:
                continue
            known = True
            if state != enabled:
                continue
            remote = call(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
            bus = text(getattr(remote, "busId", None)) if remote is not None else None
            j = index.get(pci_key(bus)) if bus else None
            if j is not None and j != i:
                direct[(i, j)] = direct.get((i, j), 0) + 1
                continue
            kind = call(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
            if kind is None or kind == _NVLINK_DEVICE_TYPE_SWITCH:
                to_switch[i] += 1
    if not known:
        return None
    ok = getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    nvlink_caps = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    counts: dict[tuple[int, int], int] = {}
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            links = direct.get((i, j), 0)
            if to_switch[i] and to_switch[j]:
                p2p = call(nvml, "nvmlDeviceGetP2PStatus", handles[i], handles[j], nvlink_caps)
                if p2p is None or p2p == ok:
                    links += min(to_switch[i], to_switch[j])
            counts[(i, j)] = links
    return counts


def matrix(
    n: int,
    level: Callable[[int, int], int | None],
    nvlinks: dict[tuple[int, int], int] | None,
) -> list[list[str | None]]:
    """nvidia-smi topo -m's GPU block: "X" on the diagonal, "NV<links>" where NVLink joins
    the pair, else the PCI level; None where nothing could tell."""
    rows: list[list[str | None]] = []
    for i in range(n):
        row: list[str | None] = []
        for j in range(n):
            links = (nvlinks or {}).get((i, j), 0)
            if i == j:
                row.append("X")
            elif links:
                row.append(f"NV{links}")
            else:
                lv = level(i, j)
                row.append(LEVEL_NAMES.get(lv) if lv is not None else None)
        rows.append(row)
    return rows
