"""GPU collectors on a fake NVML built from real nvidia-smi captures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pynvml
import pytest
from llmgw_agent.collectors import Roots, run_collectors
from llmgw_agent.collectors import gpu_topology as topo
from llmgw_agent.collectors.gpu import collect_gpus, collect_inventory
from llmgw_agent.collectors.gpu_nvml import CLOCK_EVENT_REASONS, gpu_class

from .fake_nvml import FakeNvml, fake, load_smi_q, load_smi_xml

H100 = "nvidia-smi-q-H100x8-gpud-535.161.08.txt"
NOWHERE = Path("/nonexistent-llmgw-test")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def roots_for(nvml: FakeNvml, sys: Path = NOWHERE, **memo: Any) -> Roots:
    memo.setdefault("gpu.kernel_log", None)
    memo.setdefault("clock", Clock())
    return Roots(proc=NOWHERE, sys=sys, rootfs=NOWHERE, nvml=lambda: nvml, memo=dict(memo))


def test_no_driver_reports_nothing_and_raises_nothing() -> None:
    roots = roots_for(fake(present=False))
    data, results = run_collectors(roots, part="heartbeat")
    assert "gpus" not in data and "sxids" not in data
    assert all(r["ok"] for r in results if r["name"] == "gpus")
    assert collect_inventory(roots) == {}


def test_fixture_roots_never_read_the_test_machine() -> None:
    assert collect_gpus(Roots(proc=NOWHERE, sys=NOWHERE)) == {}


def test_h100_registration_from_the_real_capture() -> None:
    gpus = collect_inventory(roots_for(fake(*load_smi_q(H100))))["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    first = gpus[0]
    assert first["uuid"] == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert first["name"] == "NVIDIA H100 80GB HBM3"
    assert first["class"] == "H100-80GB"
    assert first["memory_total_bytes"] == 81559 * 2**20
    assert first["pci_bus_id"] == "0000:19:00.0"
    assert first["ecc_uncorrected"] == 0 and first["foreign_processes"] == 0
    # Driver 535 prints only State and Status: no cluster is claimed, none is invented.
    assert first["fabric"] == {"state": "completed", "status": "success"}
    assert first["numa_node"] is None and first["nearest_adapter"] is None


def test_h100_heartbeat_cadence() -> None:
    clock = Clock()
    roots = roots_for(fake(*load_smi_q(H100)), clock=clock)
    first = collect_gpus(roots)["gpus"][0]
    assert first["utilization_percent"] == 0 and first["memory_bandwidth_percent"] == 0
    assert first["sm_clock_mhz"] == 86 and first["memory_used_bytes"] == 0
    assert first["temperature_c"] == 29 and first["memory_temperature_c"] == 39
    assert first["power_draw_w"] == 67.74 and first["power_limit_w"] == 700
    # The capture's HW Slowdown is Active through HW Power Brake Slowdown.
    assert first["clock_event_reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert first["pcie_replays"] == 67
    assert first["remapped_rows"] == {
        "correctable": 0, "uncorrectable": 0, "pending": False, "failed": False,
    }  # fmt: skip
    clock.t += 5
    again = collect_gpus(roots)["gpus"][0]
    assert "utilization_percent" in again
    assert "temperature_c" not in again and "remapped_rows" not in again
    clock.t += 5
    ten = collect_gpus(roots)["gpus"][0]
    assert "temperature_c" in ten and "pcie_replays" not in ten
    clock.t += 50
    assert "pcie_replays" in collect_gpus(roots)["gpus"][0]


def test_h200_fabric_all_zero_cluster_is_no_domain() -> None:
    (gpu,) = collect_inventory(roots_for(fake(*load_smi_q("nvidia-smi-q-H200-thamada.txt"))))[
        "gpus"
    ]
    assert gpu["class"] == "H200-141GB"
    assert gpu["fabric"] == {
        "state": "completed", "status": "success", "clique_id": 0,
        "cluster_uuid": "00000000-0000-0000-0000-000000000000", "multi_node": False,
    }  # fmt: skip


def test_gh200_volatile_ecc_is_not_the_aggregate() -> None:
    roots = roots_for(fake(*load_smi_q("nvidia-smi-q-GH200-thamada.txt")))
    (gpu,) = collect_inventory(roots)["gpus"]
    assert gpu["class"] == "GH200-96GB"  # not 480: the name counts the Grace memory
    assert gpu["ecc_uncorrected"] == 0  # volatile; the aggregate counter holds 1
    assert "fabric" not in gpu  # Fabric State N/A
    (beat,) = collect_gpus(roots)["gpus"]
    assert beat["remapped_rows"]["uncorrectable"] == 1


def test_a100_mig_xml_remapped_rows_null_and_utilisation_absent() -> None:
    roots = roots_for(fake(*load_smi_xml("nvidia-smi-q-x-A100-telegraf.xml")))
    inventory = collect_inventory(roots)["gpus"]
    assert {g["class"] for g in inventory} == {"A100-80GB"}
    beat = collect_gpus(roots)["gpus"][0]
    assert beat["remapped_rows"] is None  # N/A under MIG: asked, the card cannot say
    assert "utilization_percent" not in beat  # N/A under MIG, never 0
    assert beat["memory_temperature_c"] == 44 and beat["clock_event_reasons"] == []


def test_a100_pending_row_remap() -> None:
    roots = roots_for(fake(*load_smi_q("nvidia-smi-q-remapped-rows-A100-stas00.txt")))
    (beat,) = collect_gpus(roots)["gpus"]
    assert beat["remapped_rows"] == {
        "correctable": 1, "uncorrectable": 0, "pending": True, "failed": False,
    }  # fmt: skip
    assert "temperature_c" not in beat  # the capture elides it: unknown, not 0


def test_truncated_capture_still_reports_what_it_has() -> None:
    roots = roots_for(fake(*load_smi_q("nvidia-smi-q-H100x8-gpud-535.183.01-invalid.txt")))
    (beat,) = collect_gpus(roots)["gpus"]
    assert beat["pcie_replays"] == 120
    assert "clock_event_reasons" not in beat  # "Invalid HW Slowdown": not a reading


def test_old_driver_throttle_reasons_function() -> None:
    cards = load_smi_q("nvidia-smi-q-H200-thamada.txt")
    cards[0].reasons_api = "throttle"  # as a pre-R535 libnvidia-ml offers it
    (beat,) = collect_gpus(roots_for(fake(*cards)))["gpus"]
    assert beat["clock_event_reasons"] == ["gpu_idle"]


def test_foreign_processes_leave_out_the_agents_own(monkeypatch: pytest.MonkeyPatch) -> None:
    cards = load_smi_q("nvidia-smi-q-H200-thamada.txt")
    own, other = os.getpid(), os.getppid()  # real PIDs, not numbers from a capture
    cards[0].processes = [own, other]
    roots = roots_for(fake(*cards), **{"gpu.own_pids": {own}})
    assert collect_inventory(roots)["gpus"][0]["foreign_processes"] == 1


def test_reason_bits_are_pynvmls() -> None:
    names = {
        "gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
        "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
        "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
        "display_clock_setting": "DisplayClockSetting",
    }  # fmt: skip
    for bit, name in CLOCK_EVENT_REASONS:
        assert getattr(pynvml, f"nvmlClocksEventReason{names[name]}") == bit


@pytest.mark.parametrize(
    ("name", "mib", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
        ("NVIDIA H200", 143771, "H200-141GB"),
        ("NVIDIA GH200 480GB", 97871, "GH200-96GB"),
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
        ("NVIDIA A100-SXM4-80GB", None, "A100-80GB"),
        ("NVIDIA GH200 480GB", None, "GH200"),
        ("NVIDIA GB200", 189471, "GB200-186GB"),
        ("NVIDIA GeForce RTX 4090", 24564, "GeForce-RTX-4090-24GB"),
        (None, 81559, None),
    ],
)
def test_gpu_class(name: str | None, mib: int | None, expected: str | None) -> None:
    assert gpu_class(name, mib * 2**20 if mib else None) == expected


def _sysfs(tmp: Path) -> Path:
    """A sysfs tree: GPU0 (19:00.0) and mlx5_0 under one switch on NUMA node 0, GPU1
    (3b:00.0) and mlx5_1 under another on node 1 (the GPUs' addresses are the capture's)."""
    sys = tmp / "sys"
    devices = {
        "0000:19:00.0": "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:19:00.0",
        "0000:1a:00.0": "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:1a:00.0",
        "0000:3b:00.0": "pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:00.0/0000:3b:00.0",
        "0000:3c:00.0": "pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:01.0/0000:3c:00.0",
    }
    for bus, rel in devices.items():
        real = sys / "devices" / rel
        real.mkdir(parents=True)
        (real / "numa_node").write_text("0\n" if bus < "0000:3b" else "1\n")
        link = sys / "bus/pci/devices" / bus
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(real)
    for name, bus in (("mlx5_0", "0000:1a:00.0"), ("mlx5_1", "0000:3c:00.0")):
        ib = sys / "class/infiniband" / name
        ib.mkdir(parents=True)
        (ib / "device").symlink_to(sys / "devices" / devices[bus])
    return sys


def test_numa_node_and_nearest_adapter_from_sysfs(tmp_path: Path) -> None:
    sys = _sysfs(tmp_path)
    gpus = collect_inventory(roots_for(fake(*load_smi_q(H100)), sys=sys))["gpus"]
    assert gpus[0]["numa_node"] == 0
    assert gpus[0]["nearest_adapter"] == {"name": "mlx5_0", "level": "PIX"}
    assert gpus[1]["numa_node"] == 1
    assert gpus[1]["nearest_adapter"] == {"name": "mlx5_1", "level": "PIX"}
    assert gpus[2]["numa_node"] is None  # not in the tree: unknown, not node 0


def test_pci_levels() -> None:
    a = ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:19:00.0"]
    assert topo.pci_level(a, [*a[:3], "0000:17:01.0", "0000:1a:00.0"], 0, 0) == topo.PIX
    assert topo.pci_level(a, [*a[:2], "0000:16:01.0", "x", "y", "z"], 0, 0) == topo.PXB
    assert topo.pci_level(a, ["pci0000:15", "0000:15:02.0", "0000:20:00.0"], 0, 0) == topo.PHB
    assert topo.pci_level(a, ["pci0000:37", "0000:37:01.0"], 0, 0) == topo.NODE
    assert topo.pci_level(a, ["pci0000:97", "0000:97:01.0"], 0, 1) == topo.SYS


def test_matrix_words_like_nvidia_smi_topo() -> None:
    grid = topo.matrix(3, lambda i, j: topo.SYS if {i, j} == {0, 2} else None,
                       {(0, 1): 18, (1, 0): 18})  # fmt: skip
    assert grid == [["X", "NV18", "SYS"], ["NV18", "X", None], ["SYS", None, "X"]]


def test_no_topology_when_nvml_and_sysfs_cannot_tell() -> None:
    assert "gpu_topology" not in collect_inventory(roots_for(fake(*load_smi_q(H100))))


def test_topology_from_sysfs_when_nvml_has_none(tmp_path: Path) -> None:
    sys = _sysfs(tmp_path)
    cards = load_smi_q(H100)[:1] + load_smi_q("nvidia-smi-q-H200-thamada.txt")
    cards[1].bus_id = "0000:1a:00.0"  # put the second card where the tree has a device
    topology = collect_inventory(roots_for(fake(*cards), sys=sys))["gpu_topology"]
    assert topology["matrix"] == [["X", "PIX"], ["PIX", "X"]]
