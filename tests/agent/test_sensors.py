"""hwmon temperatures and RAPL power on recorded sysfs trees."""

from __future__ import annotations

import shutil
from pathlib import Path

from llmgw_agent.collectors import Roots
from llmgw_agent.collectors.sensors import collect_sensors, rapl_watts

FIXTURES = Path(__file__).parent / "fixtures"


class Clock:
    t = 50.0

    def __call__(self) -> float:
        return self.t


def roots(sys: Path, clock: Clock | None = None) -> Roots:
    return Roots(proc=Path("/nonexistent"), sys=sys, memo={"clock": clock or Clock()})


def test_coretemp_packages_and_inlet() -> None:
    got = collect_sensors(roots(FIXTURES / "sys-coretemp"))["sensors"]
    assert got["cpu_packages"] == [
        {"package": 0, "temperature_c": 46.0},
        {"package": 1, "temperature_c": 51.0},
    ]
    assert got["inlet_temperature_c"] == 23.0  # "Inlet Temp", not the exhaust


def test_k10temp_prefers_tdie_and_orders_sockets_by_device() -> None:
    got = collect_sensors(roots(FIXTURES / "sys-k10temp"))["sensors"]
    assert got["cpu_packages"] == [
        {"package": 0, "temperature_c": 52.125},  # Tdie of 00:18.3 (hwmon4)
        {"package": 1, "temperature_c": 48.5},  # Tctl only, 00:19.3 (hwmon0)
    ]
    assert "inlet_temperature_c" not in got  # no such sensor: absent, never 0


def test_rapl_needs_two_samples_and_handles_the_wrap(tmp_path: Path) -> None:
    sys = tmp_path / "sys"
    shutil.copytree(FIXTURES / "sys-rapl-wrap", sys)
    clock = Clock()
    r = roots(sys, clock)
    assert collect_sensors(r) == {}  # one sample: no rate yet, and no temperature sensor
    zone0, zone1 = sys / "class/powercap/intel-rapl:0", sys / "class/powercap/intel-rapl:1"
    # 10 s later: package 0 wrapped past max_energy_range_uj, package 1 used 1.5 kJ.
    (zone0 / "energy_uj").write_text("1499000000\n")
    (zone1 / "energy_uj").write_text("1501000000\n")
    clock.t += 5
    assert collect_sensors(r) == {}  # not due: at most every 10 s
    clock.t += 5
    got = collect_sensors(r)["sensors"]["cpu_packages"]
    assert got == [{"package": 0, "power_w": 150.0}, {"package": 1, "power_w": 150.0}]


def test_rapl_watts_refuses_a_wrap_it_cannot_size() -> None:
    assert rapl_watts((0, 100), (10, 50), None) is None
    assert rapl_watts((0, 100), (0, 200), 1000) is None


def test_no_sysfs_no_sensors() -> None:
    assert collect_sensors(roots(Path("/nonexistent"))) == {}
