"""The OS packages a build needs, installed from the node's own package sources.

Every command goes through the agent's command runner (and so its command_wrapper, e.g.
`sudo -n`). Packages already present are left alone, so a node whose packages an operator
manages never needs the wrapper's privileges for this.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from ..collectors import CommandRunner
from .platform import Platform

# What llama.cpp b11434 loads besides its own libraries (ldd of llama-server and its
# lib*.so): libgomp.so.1 (OpenMP, the CPU backend) and libssl.so.3/libcrypto.so.3 (the
# server's HTTPS client, cpp-httplib). Builds before ~b5000 linked libcurl.so.4 instead;
# ldd names it if an old build is ever asked for. libstdc++/libgcc_s/libc are always there.
# Ubuntu 24.04 renamed libssl3 to libssl3t64, which provides libssl3: apt takes either.
APT_CPU = ("libgomp1", "libssl3")
DNF_CPU = ("libgomp", "openssl-libs")
# The CUDA runtime the CUDA backend loads (libcudart, libcublas, libcublasLt), by the names
# NVIDIA's CUDA repositories give them for both apt and dnf; the node's package sources must
# include that repository. The kernel driver itself is the operator's, never ours.
CUDA_RUNTIME = ("cuda-cudart-{major}-{minor}", "libcublas-{major}-{minor}")
APT_VULKAN = ("libvulkan1",)
DNF_VULKAN = ("vulkan-loader",)


class PackageError(Exception):
    """A package could not be installed; the message names it and the tool's last words."""


@dataclass(frozen=True)
class PackageManager:
    name: str  # "apt-get" or "dnf"

    def query(self, package: str) -> list[str]:
        if self.name == "apt-get":
            return ["dpkg-query", "-W", "-f=${Status}", package]
        return ["rpm", "-q", package]

    def install(self, packages: Sequence[str]) -> list[str]:
        if self.name == "apt-get":
            return [
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "install",
                "-y",
                "--no-install-recommends",
                *packages,
            ]
        return ["dnf", "install", "-y", *packages]

    def refresh(self) -> list[str] | None:
        # A stale apt package list names versions its mirror no longer has.
        return ["apt-get", "update"] if self.name == "apt-get" else None


def package_manager(os_id: str | None, os_like: Sequence[str] = ()) -> PackageManager | None:
    ids = {i.lower() for i in (os_id, *os_like) if i}
    if ids & {"debian", "ubuntu"}:
        return PackageManager("apt-get")
    if ids & {"rhel", "fedora", "centos", "rocky", "almalinux", "ol", "amzn"}:
        return PackageManager("dnf")
    return None


def packages_for(platform: Platform, manager: PackageManager) -> list[str]:
    apt = manager.name == "apt-get"
    wanted = list(APT_CPU if apt else DNF_CPU)
    cuda = platform.cuda
    if cuda is not None:
        wanted += [p.format(major=cuda[0], minor=cuda[1]) for p in CUDA_RUNTIME]
    if platform.variant == "vulkan":
        wanted += APT_VULKAN if apt else DNF_VULKAN
    return wanted


def _installed(run: CommandRunner, manager: PackageManager, package: str) -> bool:
    try:
        result = run(manager.query(package))
    except (OSError, subprocess.SubprocessError):
        return False
    if manager.name == "apt-get":
        return result.returncode == 0 and result.stdout.strip().endswith(" installed")
    return result.returncode == 0


def _last_words(stdout: str, stderr: str) -> str:
    lines = [line.strip() for line in (stderr or stdout).splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def ensure_packages(
    run: CommandRunner, manager: PackageManager, packages: Sequence[str]
) -> list[str]:
    """Install those of `packages` not installed yet; return what was installed."""
    missing = [p for p in packages if not _installed(run, manager, p)]
    if not missing:
        return []
    attempts = [None, manager.refresh()] if manager.refresh() else [None]
    error = ""
    for refresh in attempts:
        try:
            if refresh is not None:
                run(refresh)
            result = run(manager.install(missing))
        except subprocess.TimeoutExpired as exc:
            raise PackageError(
                f"{manager.name} install {' '.join(missing)} did not finish within {exc.timeout:.0f} s"
            ) from exc
        except OSError as exc:
            raise PackageError(f"cannot run {manager.name}: {exc.strerror or exc}") from exc
        if result.returncode == 0:
            return missing
        error = _last_words(result.stdout, result.stderr)
    raise PackageError(f"could not install {' '.join(missing)} with {manager.name}: {error}")
