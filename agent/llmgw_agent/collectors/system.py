"""What the node is: sent with registration."""

from __future__ import annotations

import os
import platform
import re
import shlex
from pathlib import Path
from typing import Any

from .procfs import meminfo, read_text
from .registry import Roots, collector

# Flags an engine build is chosen by (llama.cpp's CPU variants, vLLM/SGLang CPU kernels).
_VECTOR_EXACT = {"fma", "f16c", "neon", "asimd", "asimdhp", "asimddp", "i8mm", "bf16"}
_VECTOR_PREFIXES = ("avx", "amx", "sve")
_NVIDIA_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)\b")


def _is_live(roots: Roots) -> bool:
    # Fall back to the running Python's view only when reading the real host: a fixture
    # root must never describe the machine that runs the tests.
    return roots.proc == Path("/proc")


def vector_flags(flags: list[str]) -> list[str]:
    keep = {f for f in flags if f in _VECTOR_EXACT or f.startswith(_VECTOR_PREFIXES)}
    return sorted(keep)


def _os_name(roots: Roots) -> str | None:
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = read_text(roots.rootfs / rel)
        if text is None:
            continue
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                parts = shlex.split(value, comments=False) if value else [""]
                fields[key.strip()] = parts[0] if parts else ""
        name = fields.get("PRETTY_NAME") or fields.get("NAME")
        if name:
            return name
    if _is_live(roots) and roots.rootfs == Path("/"):
        return f"{platform.system()} {platform.release()}"
    return None


def _proc_value(roots: Roots, rel: str, live: str) -> str | None:
    text = read_text(roots.proc / rel)
    if text is not None and text.strip():
        return text.strip()
    return live if _is_live(roots) and live else None


def _cpuinfo(roots: Roots) -> tuple[str | None, list[str], int | None]:
    text = read_text(roots.proc / "cpuinfo")
    if text is None:
        return None, [], None
    model: str | None = None
    flags: list[str] = []
    cpus = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            cpus += 1
        # x86 says "model name"; some ARM kernels say "Processor" or "cpu model".
        elif key in ("model name", "Processor", "cpu model") and model is None and value:
            model = value
        # x86 "flags", ARM "Features"; every CPU repeats them, the first is enough.
        elif key in ("flags", "Features") and not flags:
            flags = value.split()
    return model, flags, cpus or None


def _nvidia_driver(roots: Roots) -> str | None:
    text = read_text(roots.proc / "driver" / "nvidia" / "version")
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("NVRM"):
            # "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  550.54.15  ..."
            match = _NVIDIA_VERSION.search(line.split("Module", 1)[-1])
            return match.group(1) if match else None
    return None


@collector("system", part="register")
def collect_system(roots: Roots) -> dict[str, Any]:
    model, flags, cpus = _cpuinfo(roots)
    if cpus is None and _is_live(roots):
        cpus = os.cpu_count()
    try:
        memory_total: int | None = meminfo(roots.proc)["MemTotal"]
    except (OSError, KeyError, ValueError):
        memory_total = None
    return {
        "system": {
            "os": _os_name(roots),
            "kernel": _proc_value(roots, "sys/kernel/osrelease", platform.release()),
            "arch": _proc_value(roots, "sys/kernel/arch", platform.machine()),
            "cpu_model": model,
            "cpu_flags": vector_flags(flags),
            "cpus": cpus,
            "memory_total_bytes": memory_total,
            "nvidia_driver": _nvidia_driver(roots),
        }
    }
