"""A node's heat and power from sysfs: CPU package temperatures, board inlet temperature,
CPU package power from RAPL. Sampled at most every 10 s; a sensor that is not there is
absent, never 0.

What is matched, in <sys>/class/hwmon/hwmon*/ (name, temp*_label, temp*_input in m°C):
- Intel `coretemp`: labels "Package id N" -> package N.
- AMD `k10temp` (one hwmon per socket, numbered in order of the device's PCI path):
  "Tdie" when present, else "Tctl" (Tctl carries a fan-control offset on some parts).
- Board inlet: any hwmon whose temp label contains "inlet" or "ambient" (case-insensitive:
  Dell "Inlet Temp", HPE "01-Inlet Ambient", IPMI/ACPI "Ambient Temp"); the highest
  such reading is sent, as the air a node breathes is as warm as its warmest intake.
RAPL: <sys>/class/powercap/intel-rapl:N/energy_uj (AMD's RAPL uses the same driver),
watts = Δenergy / Δt between two samples; the counter wraps at max_energy_range_uj.
The first sample has nothing to subtract from, so power appears from the second on.
Since CVE-2020-8694 energy_uj is readable by root only: unreadable means absent.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .gpu_nvml import due, now
from .procfs import read_text
from .registry import Roots, collector

_PACKAGE = re.compile(r"^Package id (\d+)$")
_INLET = re.compile(r"inlet|ambient", re.IGNORECASE)
_RAPL_PACKAGE = re.compile(r"^intel-rapl:(\d+)$")


def _read_int(path: Path) -> int | None:
    raw = read_text(path)
    try:
        return int(raw.strip()) if raw is not None else None
    except ValueError:
        return None


def _temps(hwmon: Path) -> dict[str, float]:
    """label -> °C for each temp*_input of one hwmon device (unlabelled: "tempN")."""
    out: dict[str, float] = {}
    try:
        inputs = sorted(hwmon.glob("temp*_input"))
    except OSError:
        return out
    for inp in inputs:
        stem = inp.name.removesuffix("_input")
        value = _read_int(inp)
        if value is None:
            continue
        label = read_text(hwmon / f"{stem}_label")
        out[label.strip() if label else stem] = value / 1000
    return out


def _hwmons(sys: Path) -> list[tuple[str, Path]]:
    base = sys / "class" / "hwmon"
    try:
        dirs = list(base.iterdir())
    except OSError:
        return []
    found = []
    for d in dirs:
        name = read_text(d / "name")
        if name is not None:
            # Sorted by the device behind it: socket 0's k10temp (00:18.3) before socket 1's.
            found.append((os.path.realpath(d / "device"), d.name, name.strip(), d))
    found.sort()
    return [(name, d) for _, _, name, d in found]


def read_temperatures(sys: Path) -> tuple[dict[int, float], float | None]:
    """({package: °C}, inlet °C or None)."""
    packages: dict[int, float] = {}
    inlets: list[float] = []
    k10 = 0
    for name, d in _hwmons(sys):
        temps = _temps(d)
        if name == "coretemp":
            for label, value in temps.items():
                m = _PACKAGE.match(label)
                if m:
                    packages[int(m.group(1))] = value
        elif name == "k10temp":
            die = temps.get("Tdie", temps.get("Tctl"))
            if die is not None:
                packages[k10] = die
            k10 += 1
        inlets.extend(v for label, v in temps.items() if _INLET.search(label))
    return packages, (max(inlets) if inlets else None)


def read_rapl(sys: Path) -> dict[int, tuple[int, int | None]]:
    """{package: (energy µJ, max_energy_range µJ or None)} for each readable package."""
    base = sys / "class" / "powercap"
    out: dict[int, tuple[int, int | None]] = {}
    try:
        zones = list(base.iterdir())
    except OSError:
        return out
    for zone in zones:
        m = _RAPL_PACKAGE.match(zone.name)
        if not m:
            continue  # intel-rapl:0:0 (core), :1 (uncore), dram: not the package
        energy = _read_int(zone / "energy_uj")
        if energy is not None:
            out[int(m.group(1))] = (energy, _read_int(zone / "max_energy_range_uj"))
    return out


def rapl_watts(
    before: tuple[float, int], after: tuple[float, int], max_range_uj: int | None
) -> float | None:
    """Watts between two (seconds, µJ) samples; a smaller second reading has wrapped."""
    dt = after[0] - before[0]
    if dt <= 0:
        return None
    delta = after[1] - before[1]
    if delta < 0:
        if not max_range_uj:
            return None
        delta += max_range_uj
    return round(delta / dt / 1e6, 3)


@collector("sensors")
def collect_sensors(roots: Roots) -> dict[str, Any]:
    if not due(roots, "sensors.at", 10):
        return {}
    packages, inlet = read_temperatures(roots.sys)
    t = now(roots)
    energy = read_rapl(roots.sys)
    previous: dict[int, tuple[float, int]] = roots.memo.get("sensors.rapl", {})
    roots.memo["sensors.rapl"] = {p: (t, e) for p, (e, _) in energy.items()}
    watts: dict[int, float] = {}
    for pkg, (e, max_range) in energy.items():
        if pkg in previous:
            w = rapl_watts(previous[pkg], (t, e), max_range)
            if w is not None:
                watts[pkg] = w
    cpus = []
    for pkg in sorted(set(packages) | set(watts)):
        entry: dict[str, Any] = {"package": pkg}
        if pkg in packages:
            entry["temperature_c"] = packages[pkg]
        if pkg in watts:
            entry["power_w"] = watts[pkg]
        cpus.append(entry)
    sensors: dict[str, Any] = {}
    if cpus:
        sensors["cpu_packages"] = cpus
    if inlet is not None:
        sensors["inlet_temperature_c"] = inlet
    return {"sensors": sensors} if sensors else {}
