"""What the engine installer needs to know about the node, read through the agent's roots."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from ..collectors import Roots
from ..collectors.procfs import read_text
from ..collectors.system import collect_system


@dataclass(frozen=True)
class HostFacts:
    arch: str | None
    # None when /proc/cpuinfo could not be read: unknown, so nothing to warn about.
    cpu_flags: tuple[str, ...] | None
    nvidia_driver: str | None
    os_id: str | None
    os_like: tuple[str, ...] = ()


def os_release(rootfs: Path) -> dict[str, str]:
    """<rootfs>/etc/os-release (or usr/lib/os-release) as a dict; empty when absent."""
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = read_text(rootfs / rel)
        if text is None:
            continue
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.startswith("#"):
                parts = shlex.split(value) if value.strip() else [""]
                fields[key.strip()] = parts[0] if parts else ""
        return fields
    return {}


def host_facts(roots: Roots) -> HostFacts:
    system = collect_system(roots)["system"]
    cpuinfo_read = read_text(roots.proc / "cpuinfo") is not None
    release = os_release(roots.rootfs)
    return HostFacts(
        arch=system.get("arch"),
        cpu_flags=tuple(system.get("cpu_flags") or ()) if cpuinfo_read else None,
        nvidia_driver=system.get("nvidia_driver"),
        os_id=release.get("ID") or None,
        os_like=tuple(release.get("ID_LIKE", "").split()),
    )
