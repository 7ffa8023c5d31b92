"""The engine installer: which build a node needs, installing it safely, and proving it runs."""

from __future__ import annotations

from .archive import ArchiveError, DamagedArchiveError, UnsafeArchiveError, unpack
from .download import DownloadError, download
from .host import HostFacts, host_facts
from .installer import Installed, InstallError, InstallLimits, install, recheck
from .manager import EngineManager, EngineState
from .packages import PackageError, PackageManager, ensure_packages, package_manager, packages_for
from .platform import CUDA_MIN_DRIVER, NO_AVX2, NoBuildError, choose_build, cpu_warnings
from .spec import Build, EngineSpec
from .verify import VerifyError, parse_llama_version

__all__ = [
    "CUDA_MIN_DRIVER",
    "ArchiveError",
    "DamagedArchiveError",
    "NO_AVX2",
    "Build",
    "DownloadError",
    "EngineManager",
    "EngineSpec",
    "EngineState",
    "HostFacts",
    "InstallError",
    "InstallLimits",
    "Installed",
    "NoBuildError",
    "PackageError",
    "PackageManager",
    "UnsafeArchiveError",
    "VerifyError",
    "choose_build",
    "cpu_warnings",
    "download",
    "ensure_packages",
    "host_facts",
    "install",
    "package_manager",
    "packages_for",
    "parse_llama_version",
    "recheck",
    "unpack",
]
