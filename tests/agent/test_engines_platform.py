"""Which build a node gets, what it warns about, and which OS packages it installs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from llmgw_agent.collectors import CommandResult
from llmgw_agent.engines import (
    NO_AVX2,
    NoBuildError,
    PackageError,
    choose_build,
    cpu_warnings,
    ensure_packages,
    host_facts,
    package_manager,
    packages_for,
)
from llmgw_agent.engines.host import os_release
from llmgw_agent.engines.platform import cuda_fallback_note, parse_platform

from tests.agent.engine_helpers import RecordingRunner
from tests.agent.helpers import host_roots

B = {"url": "https://example.invalid/x.tar.gz", "sha256": "0" * 64}
# Platform keys as upstream's release assets spell them (llama-b11434-bin-<key>.tar.gz),
# plus CUDA builds named like its Windows ones (win-cuda-12.4-x64).
BUILDS = {
    k: B
    for k in (
        "ubuntu-x64",
        "ubuntu-arm64",
        "ubuntu-vulkan-x64",
        "ubuntu-rocm-7.2-x64",
        "ubuntu-cuda-12.4-x64",
        "ubuntu-cuda-12.8-x64",
        "ubuntu-cuda-13.1-x64",
        "ubuntu-cuda-12.4-arm64",
    )
}


def test_cpu_build_without_a_driver_and_never_vulkan_or_rocm() -> None:
    assert choose_build(BUILDS, "x86_64", None, "debian") == "ubuntu-x64"
    assert choose_build(BUILDS, "aarch64", None, "ubuntu") == "ubuntu-arm64"


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("550.54.15", "ubuntu-cuda-12.4-x64"),  # 12.8 needs 570.26
        ("570.26", "ubuntu-cuda-12.8-x64"),
        ("575.57.08", "ubuntu-cuda-12.8-x64"),  # 13.x needs a 580+ driver
        ("590.48.01", "ubuntu-cuda-13.1-x64"),
        ("550.54.14", "ubuntu-cuda-12.4-x64"),  # exactly the toolkit's own driver
    ],
)
def test_cuda_build_is_the_highest_the_driver_supports(driver: str, expected: str) -> None:
    assert choose_build(BUILDS, "x86_64", driver, "ubuntu") == expected


def test_a_driver_too_old_for_every_cuda_build_gets_the_cpu_build_and_a_note() -> None:
    chosen = choose_build(BUILDS, "x86_64", "535.183.01", "ubuntu")
    assert chosen == "ubuntu-x64"
    note = cuda_fallback_note(BUILDS, chosen, "x86_64", "535.183.01")
    assert note is not None
    assert note.startswith("NVIDIA driver 535.183.01 runs none of the CUDA builds offered")
    assert "CUDA 12.4 needs driver 550.54.14" in note


def test_arm64_with_a_driver_gets_the_arm64_cuda_build() -> None:
    assert choose_build(BUILDS, "aarch64", "560.35.03", "ubuntu") == "ubuntu-cuda-12.4-arm64"


def test_a_cuda_version_missing_from_the_table_is_never_chosen() -> None:
    builds = {"ubuntu-x64": B, "ubuntu-cuda-13.3-x64": B}
    assert choose_build(builds, "x86_64", "610.43.02", "ubuntu") == "ubuntu-x64"


def test_a_build_for_this_very_os_beats_the_generic_one() -> None:
    builds = {"ubuntu-x64": B, "rhel-x64": B}
    assert choose_build(builds, "x86_64", None, "rocky", ["rhel", "centos", "fedora"]) == "rhel-x64"
    assert choose_build(builds, "x86_64", None, "debian") == "ubuntu-x64"


def test_no_build_for_this_node_names_what_was_offered() -> None:
    with pytest.raises(NoBuildError, match=r"no build for arm64 .*offered: ubuntu-x64"):
        choose_build({"ubuntu-x64": B}, "aarch64", None, "ubuntu")
    with pytest.raises(NoBuildError, match="unknown processor architecture 'riscv64'"):
        choose_build(BUILDS, "riscv64", None, "ubuntu")


def test_platform_keys_parse() -> None:
    p = parse_platform("ubuntu-cuda-12.4-x64")
    assert p is not None and (p.os, p.variant, p.arch, p.cuda) == (
        "ubuntu",
        "cuda-12.4",
        "x64",
        (12, 4),
    )
    assert parse_platform("x64") is None


def test_a_cpu_without_avx2_gets_the_five_times_slower_warning() -> None:
    qemu64 = ["fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2"]
    assert cpu_warnings("x86_64", qemu64) == [NO_AVX2]
    assert NO_AVX2.startswith("this CPU has no AVX2: ")
    assert "about five times slower" in NO_AVX2
    assert cpu_warnings("x86_64", ["avx", "avx2", "fma"]) == []
    # Unknown flags warn about nothing; ARM has no AVX2 to miss.
    assert cpu_warnings("x86_64", None) == []
    assert cpu_warnings("aarch64", ["neon", "asimd"]) == []


def test_host_facts_from_the_recorded_host() -> None:
    facts = host_facts(host_roots())
    assert facts.os_id == "debian"
    assert facts.arch == "x86_64"
    assert facts.cpu_flags is not None and "avx2" in facts.cpu_flags
    assert facts.nvidia_driver == "550.54.15"


def test_host_facts_with_no_cpuinfo_leaves_flags_unknown(tmp_path: Path) -> None:
    facts = host_facts(host_roots().__class__(proc=tmp_path, sys=tmp_path, rootfs=tmp_path))
    assert facts.cpu_flags is None and facts.os_id is None
    assert cpu_warnings("x86_64", facts.cpu_flags) == []


def test_os_release_id_like(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text('ID="rocky"\nID_LIKE="rhel centos fedora"\n')
    release = os_release(tmp_path)
    assert release["ID"] == "rocky"
    manager = package_manager(release["ID"], release["ID_LIKE"].split())
    assert manager is not None and manager.name == "dnf"
    debian = package_manager("debian")
    assert debian is not None and debian.name == "apt-get"
    assert package_manager("opensuse-leap", ["suse"]) is None


def test_packages_per_build() -> None:
    apt, dnf = package_manager("ubuntu"), package_manager("rhel")
    assert apt is not None and dnf is not None
    cpu, cuda = parse_platform("ubuntu-x64"), parse_platform("ubuntu-cuda-12.4-x64")
    assert cpu is not None and cuda is not None
    assert "libgomp1" in packages_for(cpu, apt)
    assert "libgomp" in packages_for(cpu, dnf)
    assert not any("cuda" in p for p in packages_for(cpu, apt))
    assert {"cuda-cudart-12-4", "libcublas-12-4"} <= set(packages_for(cuda, apt))
    assert {"cuda-cudart-12-4", "libcublas-12-4"} <= set(packages_for(cuda, dnf))


def _dpkg(installed: set[str], install_rc: Sequence[int] = (0,)) -> RecordingRunner:
    results = list(install_rc)

    def answer(argv: Sequence[str]) -> CommandResult:
        if argv[0] == "dpkg-query":
            if argv[-1] in installed:
                return CommandResult(0, "install ok installed", "")
            return CommandResult(1, "", f"dpkg-query: no packages found matching {argv[-1]}")
        if "install" in argv:
            rc = results.pop(0) if results else 0
            return CommandResult(rc, "", "" if rc == 0 else "E: Unable to locate package libgomp1")
        return CommandResult(0, "", "")

    return RecordingRunner(answer)


def test_only_missing_packages_are_installed_through_the_runner() -> None:
    run = _dpkg({"libssl3", "libcurl4"})
    apt = package_manager("debian")
    assert apt is not None
    assert ensure_packages(run, apt, ["libgomp1", "libssl3", "libcurl4"]) == ["libgomp1"]
    installs = run.commands("install")
    assert installs == [
        ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y",
         "--no-install-recommends", "libgomp1"],
    ]  # fmt: skip


def test_nothing_is_run_as_root_when_all_is_installed() -> None:
    run = RecordingRunner()
    apt = package_manager("debian")
    assert apt is not None
    assert ensure_packages(run, apt, ["libgomp1"]) == []
    assert run.commands("apt-get") == []


def test_a_failed_install_refreshes_the_lists_once_then_names_the_package() -> None:
    run = _dpkg(set(), install_rc=(100, 100))
    apt = package_manager("debian")
    assert apt is not None
    with pytest.raises(PackageError) as exc:
        ensure_packages(run, apt, ["libgomp1"])
    assert str(exc.value) == (
        "could not install libgomp1 with apt-get: E: Unable to locate package libgomp1"
    )
    assert ["apt-get", "update"] in run.calls
    assert len(run.commands("install")) == 2


def test_dnf_on_rhel_likes() -> None:
    def answer(argv: Sequence[str]) -> CommandResult:
        return CommandResult(1 if argv[0] == "rpm" else 0, "", "")

    run = RecordingRunner(answer)
    dnf = package_manager("rocky", ["rhel"])
    assert dnf is not None
    assert ensure_packages(run, dnf, ["libgomp"]) == ["libgomp"]
    assert run.calls == [["rpm", "-q", "libgomp"], ["dnf", "install", "-y", "libgomp"]]
