"""Which build of an engine this node should run: its processor, its driver, its OS.

Platform keys are the part of llama.cpp's release asset names after `bin-`:
`llama-b11434-bin-ubuntu-x64.tar.gz` is offered as `ubuntu-x64`. Upstream's release
workflow (ggml-org/llama.cpp .github/workflows/release.yml) publishes, for Linux,
`ubuntu-x64`, `ubuntu-arm64`, `ubuntu-s390x`, `ubuntu-vulkan-x64`, `ubuntu-vulkan-arm64`,
`ubuntu-rocm-7.2-x64`, `ubuntu-openvino-<v>-x64` and `ubuntu-sycl-fp16|fp32-x64`, each a
tar.gz with one top folder `llama-<tag>/`. Its CUDA builds are Windows only
(`win-cuda-12.4-x64`, `win-cuda-13.3-x64`, zip); Linux CUDA builds were proposed as
`ubuntu-cuda-<major.minor>-<arch>` (ggml-org/llama.cpp PRs 16773 and 25571). A control
plane that builds its own CUDA archives names them the same way, and this module reads
any `<os>-cuda-<major.minor>-<arch>` key as a CUDA build of that toolkit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The minimum Linux driver for each CUDA toolkit's GA release: NVIDIA's "CUDA Toolkit and
# Corresponding Driver Versions" table (CUDA Toolkit Release Notes, docs.nvidia.com/cuda/
# cuda-toolkit-release-notes, "Toolkit Driver Version", Linux x86_64; the sbsa/aarch64
# packages carry the same numbers). The toolkit's own driver, not the lower floor of "minor
# version compatibility" (>= 525 for any 12.x): under that floor PTX compiled by a newer
# toolkit cannot be JIT-compiled, and llama.cpp ships PTX for GPUs newer than its build.
# A toolkit missing here is never chosen: guessing its driver would fail only at load time.
CUDA_MIN_DRIVER: dict[tuple[int, int], tuple[int, ...]] = {
    (11, 8): (520, 61, 5),
    (12, 0): (525, 60, 13),
    (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3),
    (12, 3): (545, 23, 6),
    (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2),
    (12, 6): (560, 28, 3),
    (12, 8): (570, 26),
    (12, 9): (575, 51, 3),
    (13, 0): (580, 65, 6),
    (13, 1): (590, 44, 1),
}

# `uname -m` spellings to the release names' spellings.
ARCH_NAMES = {
    "x86_64": "x64",
    "amd64": "x64",
    "x64": "x64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "s390x": "s390x",
}
# Builds for these are portable across glibc distributions; an exact OS match is preferred.
GENERIC_OS = ("ubuntu", "linux")

NO_AVX2 = (
    "this CPU has no AVX2: llama.cpp's CPU build runs about five times slower on it. "
    "A VM's default CPU type (qemu64, kvm64) hides the host's vector extensions; "
    "give the VM the host's CPU model (host-passthrough)"
)

_CUDA = re.compile(r"^cuda-(\d+)\.(\d+)$")
_DRIVER = re.compile(r"^\d+(\.\d+)*$")


class NoBuildError(Exception):
    """No offered build runs here; the message says what was offered and what this node is."""


@dataclass(frozen=True)
class Platform:
    """A parsed platform key: `ubuntu-cuda-12.4-x64` is os ubuntu, variant cuda-12.4, arch x64."""

    key: str
    os: str
    variant: str
    arch: str

    @property
    def cuda(self) -> tuple[int, int] | None:
        match = _CUDA.match(self.variant)
        return (int(match.group(1)), int(match.group(2))) if match else None


def parse_platform(key: str) -> Platform | None:
    parts = key.split("-")
    if len(parts) < 2 or not all(parts):
        return None
    return Platform(key=key, os=parts[0], variant="-".join(parts[1:-1]), arch=parts[-1])


def driver_version(text: str | None) -> tuple[int, ...] | None:
    """ "550.54.15" as (550, 54, 15); None when no driver is loaded or it is unreadable."""
    if not text or not _DRIVER.match(text.strip()):
        return None
    return tuple(int(p) for p in text.strip().split("."))


def cuda_supported(driver: str | None, cuda: tuple[int, int]) -> bool:
    needs = CUDA_MIN_DRIVER.get(cuda)
    have = driver_version(driver)
    return needs is not None and have is not None and have >= needs


def choose_build(
    builds: Mapping[str, Any],
    arch: str | None,
    nvidia_driver: str | None,
    os_id: str | None,
    os_like: Sequence[str] = (),
) -> str:
    """The platform key of `builds` this node should install.

    A CUDA build of the highest toolkit the loaded NVIDIA driver supports; otherwise (no
    driver, or none of the offered toolkits fits it) the plain CPU build. Vulkan, ROCm,
    SYCL and the like are never chosen on their own. Among equal builds, one made for this
    very OS (`os_id`, then `os_like`) beats a generic `ubuntu-`/`linux-` one.
    """
    want_arch = ARCH_NAMES.get((arch or "").lower())
    offered = sorted(builds)
    if want_arch is None:
        raise NoBuildError(f"unknown processor architecture {arch!r}; offered: {_list(offered)}")
    oses = [o for o in (os_id, *os_like) if o]
    rank = {o: i for i, o in enumerate([*oses, *GENERIC_OS])}
    usable = [
        p
        for p in (parse_platform(k) for k in offered)
        if p is not None and p.arch == want_arch and p.os in rank
    ]

    def os_rank(p: Platform) -> int:
        return rank[p.os]

    cuda = [p for p in usable if p.cuda is not None and cuda_supported(nvidia_driver, p.cuda)]
    if driver_version(nvidia_driver) is not None and cuda:
        best = max(p.cuda for p in cuda if p.cuda is not None)
        return min((p for p in cuda if p.cuda == best), key=os_rank).key
    cpu = [p for p in usable if p.variant == ""]
    if cpu:
        return min(cpu, key=os_rank).key
    raise NoBuildError(
        f"no build for {want_arch} on {os_id or 'this OS'}"
        + (f" with NVIDIA driver {nvidia_driver}" if nvidia_driver else "")
        + f"; offered: {_list(offered)}"
    )


def cuda_fallback_note(
    builds: Mapping[str, Any], chosen: str, arch: str | None, nvidia_driver: str | None
) -> str | None:
    """Why a node with an NVIDIA driver got a CPU build, when CUDA builds were offered."""
    if driver_version(nvidia_driver) is None:
        return None
    picked = parse_platform(chosen)
    if picked is None or picked.cuda is not None:
        return None
    want_arch = ARCH_NAMES.get((arch or "").lower())
    offered = [
        p.cuda
        for p in (parse_platform(k) for k in builds)
        if p is not None and p.cuda is not None and p.arch == want_arch
    ]
    if not offered:
        return None
    needs = [
        f"CUDA {c[0]}.{c[1]} needs driver {'.'.join(map(str, CUDA_MIN_DRIVER[c]))}"
        if c in CUDA_MIN_DRIVER
        else f"CUDA {c[0]}.{c[1]} is not in this agent's driver table"
        for c in sorted(set(offered))
    ]
    return (
        f"NVIDIA driver {nvidia_driver} runs none of the CUDA builds offered "
        f"({'; '.join(needs)}): installing the CPU build"
    )


def cpu_warnings(arch: str | None, cpu_flags: Iterable[str] | None) -> list[str]:
    """Warnings about the processor itself. Unknown flags (None) warn about nothing."""
    if cpu_flags is None or ARCH_NAMES.get((arch or "").lower()) != "x64":
        return []
    return [] if "avx2" in set(cpu_flags) else [NO_AVX2]


def _list(keys: Sequence[str]) -> str:
    return ", ".join(keys) if keys else "nothing"
