"""Every install step is bounded and every failure ends in `failed` with its reason.

A damaged archive, one that unpacks past agent.yaml's limit, a download that stalls or
never ends and a `--version` that hangs each end the engine `failed`, saying why, with
nothing half-installed left behind; never `installing` for ever. The archives are real
(tarfile, zipfile), served over real HTTP from 127.0.0.1; the binary is a shell script,
the one thing here that never needs the real llama-server.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.config import ConfigError, parse_config
from llmgw_agent.engines import EngineManager, HostFacts, InstallLimits
from llmgw_agent.engines.verify import MARKER

from tests.agent.engine_helpers import (
    ASSET,
    TAG,
    RecordingRunner,
    add_bytes,
    file_server,
    sha256_of,
    stalling_server,
    tar_info,
)
from tests.agent.helpers import host_roots

HOST = HostFacts("x86_64", ("avx", "avx2", "fma"), None, "debian")
PLATFORM = "ubuntu-x64"
MiB = 1 << 20
# Prints a build that would pass, so only the step under test can fail.
GOOD_SERVER = b"#!/bin/sh\necho 'version: 0.6.0-dev (build 11434, commit 3f2a9c1)' >&2\n"


def spec(url: str, sha256: str) -> dict[str, Any]:
    return {
        "name": "llama.cpp",
        "version": TAG,
        "builds": {PLATFORM: {"url": url, "sha256": sha256}},
    }


@pytest.fixture
def served(tmp_path: Path) -> Path:
    folder = tmp_path / "served"
    folder.mkdir()
    return folder


@pytest.fixture
def server(served: Path) -> Iterator[str]:
    with file_server(served) as url:
        yield url


def _manager(tmp_path: Path, **limits: Any) -> EngineManager:
    return EngineManager(
        engines_dir=tmp_path / "engines",
        host=HOST,
        run_packages=RecordingRunner(),
        limits=InstallLimits(**limits),
    )


def _converge(manager: EngineManager, desired: dict[str, Any], within: float = 60) -> Any:
    """The engine's report entry once the worker is idle; fails if that takes `within` s."""
    manager.converge([desired])
    assert manager.wait(within), f"the install was still running after {within} s"
    [entry] = [e for e in manager.report()["engines"] if e["name"] == "llama.cpp"]
    return entry


def _nothing_left(tmp_path: Path) -> None:
    """No install, no marker, no staging folder, no download left behind."""
    engines = tmp_path / "engines"
    assert sorted(p.name for p in engines.iterdir()) == [".downloads"]
    assert list((engines / ".downloads").iterdir()) == []
    assert not any(engines.rglob(MARKER))


def _release_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        tar.addfile(tar_info(f"llama-{TAG}", tarfile.DIRTYPE))
        add_bytes(tar, f"llama-{TAG}/llama-server", GOOD_SERVER, mode=0o755)
        for name, data in members:
            add_bytes(tar, f"llama-{TAG}/{name}", data)
    return path


def _release_zip(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        info = zipfile.ZipInfo(f"llama-{TAG}/llama-server")
        info.external_attr = 0o100755 << 16
        zf.writestr(info, GOOD_SERVER)
        for name, data in members:
            zf.writestr(f"llama-{TAG}/{name}", data)
    return path


def _truncated_tar_gz(path: Path) -> tuple[Path, str]:
    _release_tar(path, [("libllama.so", os.urandom(300_000))])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path, "Compressed file ended before the end-of-stream marker was reached"


def _truncated_tar(path: Path) -> tuple[Path, str]:
    _release_tar(path, [("libllama.so", os.urandom(300_000))], mode="w")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path, "unexpected end of data"


def _bad_crc_zip(path: Path) -> tuple[Path, str]:
    blob = os.urandom(300_000)
    _release_zip(path, [("libllama.so", blob)])
    data = bytearray(path.read_bytes())
    at = data.index(blob[:64])
    data[at : at + 64] = bytes(b ^ 0xFF for b in data[at : at + 64])
    path.write_bytes(bytes(data))
    return path, f"Bad CRC-32 for file 'llama-{TAG}/libllama.so'"


@pytest.mark.parametrize(
    ("asset", "damage"),
    [
        (ASSET, _truncated_tar_gz),
        (f"llama-{TAG}-bin-ubuntu-x64.tar", _truncated_tar),
        (f"llama-{TAG}-bin-ubuntu-x64.zip", _bad_crc_zip),
    ],
    ids=["truncated-gzip", "truncated-tar", "zip-bad-crc"],
)
def test_a_damaged_archive_ends_failed_with_the_reason(
    tmp_path: Path, served: Path, server: str, asset: str, damage: Any
) -> None:
    # The sha256 is the damaged file's own: a release published broken, which only
    # unpacking can find out.
    archive, detail = damage(served / asset)
    manager = _manager(tmp_path)
    entry = _converge(manager, spec(f"{server}/{asset}", sha256_of(archive)))
    assert entry["status"] == "failed", entry
    assert entry["message"] == (
        f"{asset}: damaged archive: {detail}; it matched its sha256, so the file published is bad"
    )
    assert entry["path"] is None
    _nothing_left(tmp_path)


def test_an_archive_past_the_unpack_limit_ends_failed_naming_both_numbers(
    tmp_path: Path, served: Path, server: str
) -> None:
    # 3 MiB of zeros packs into a few kilobytes: a small bomb against a small limit.
    archive = _release_tar(served / ASSET, [("libggml-cuda.so", bytes(3 * MiB))])
    assert archive.stat().st_size < 20_000
    config = parse_config(
        "server_url: http://x\ncredential_file: c\nengines_dir: engines\n"
        "engines_max_unpacked_gib: 0.002\n",
        base=tmp_path,
    )
    assert config.engines_max_unpacked_gib == 0.002
    manager = EngineManager.from_config(config, host_roots(), run_packages=RecordingRunner())
    entry = _converge(manager, spec(f"{server}/{ASSET}", sha256_of(archive)))
    assert entry["status"] == "failed", entry
    assert entry["message"] == (
        f"{ASSET}: unpacks to at least 3.00 MiB, more than the 2.05 MiB allowed "
        "(engines_max_unpacked_gib in agent.yaml)"
    )
    _nothing_left(tmp_path)


def test_an_archive_of_too_many_members_ends_failed(
    tmp_path: Path, served: Path, server: str
) -> None:
    archive = _release_tar(served / ASSET, [(f"f{i}", b"") for i in range(20)])
    manager = _manager(tmp_path, members=10)
    entry = _converge(manager, spec(f"{server}/{ASSET}", sha256_of(archive)))
    assert entry["status"] == "failed", entry
    assert entry["message"] == f"{ASSET}: holds at least 11 members, more than the 10 allowed"
    _nothing_left(tmp_path)


def test_a_download_larger_than_the_limit_is_refused(
    tmp_path: Path, served: Path, server: str
) -> None:
    archive = served / ASSET
    archive.write_bytes(os.urandom(3 * MiB))
    manager = _manager(tmp_path, unpacked_bytes=2 * MiB)
    entry = _converge(manager, spec(f"{server}/{ASSET}", sha256_of(archive)))
    assert entry["status"] == "failed", entry
    assert entry["message"] == (
        f"download of {ASSET} is 3.00 MiB, more than the 2.00 MiB allowed "
        "(engines_max_unpacked_gib in agent.yaml)"
    )
    _nothing_left(tmp_path)
    # Without a Content-Length to refuse at once (a file: URL here), it stops at the limit.
    entry = _converge(
        _manager(tmp_path, unpacked_bytes=2 * MiB), spec(f"file://{archive}", "0" * 64)
    )
    assert entry["message"] == (
        f"download of {ASSET} passed the 2.00 MiB allowed (engines_max_unpacked_gib in agent.yaml)"
    )
    _nothing_left(tmp_path)


def test_a_download_that_stalls_ends_failed_within_the_read_timeout(
    tmp_path: Path, served: Path
) -> None:
    archive = _release_tar(served / ASSET, [("libllama.so", os.urandom(MiB))])
    manager = _manager(tmp_path, read_s=1)
    with stalling_server(served) as stalling:
        started = time.monotonic()
        entry = _converge(manager, spec(f"{stalling.url}/{ASSET}", sha256_of(archive)), 30)
        took = time.monotonic() - started
    assert entry["status"] == "failed", entry
    assert entry["message"] == f"download of {ASSET} stalled: no data for 1 s"
    assert took < 10
    _nothing_left(tmp_path)


def test_a_download_that_never_ends_ends_failed_at_its_deadline(
    tmp_path: Path, served: Path
) -> None:
    # A byte every 50 ms never trips the read timeout: only the deadline ends it.
    archive = _release_tar(served / ASSET, [("libllama.so", os.urandom(MiB))])
    manager = _manager(tmp_path, read_s=1, download_s=2)
    with stalling_server(served, drip_s=0.05) as dripping:
        started = time.monotonic()
        entry = _converge(manager, spec(f"{dripping.url}/{ASSET}", sha256_of(archive)), 30)
        took = time.monotonic() - started
    assert entry["status"] == "failed", entry
    # A kilobyte and a few dripped bytes of the whole, each printed in its own unit.
    assert re.fullmatch(
        rf"download of {re.escape(ASSET)} did not finish within 2 s "
        r"\(1\.\d\d KiB of 1\.00 MiB received\)",
        entry["message"],
    ), entry["message"]
    assert took < 10
    _nothing_left(tmp_path)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def test_a_version_that_hangs_ends_failed_and_leaves_no_process(
    tmp_path: Path, served: Path, server: str
) -> None:
    # A launcher script whose child hangs: the child must go too, not only the script.
    pidfile = tmp_path / "child.pid"
    hang = f"#!/bin/sh\nsleep 120 &\necho $! > {pidfile}\nwait\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        add_bytes(tar, f"llama-{TAG}/llama-server", hang, mode=0o755)
    archive = served / ASSET
    archive.write_bytes(buf.getvalue())
    manager = _manager(tmp_path, version_s=1)
    started = time.monotonic()
    entry = _converge(manager, spec(f"{server}/{ASSET}", sha256_of(archive)), 30)
    took = time.monotonic() - started
    assert entry["status"] == "failed", entry
    assert entry["message"] == "llama-server --version did not finish within 1 s"
    assert took < 15
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the hung --version's child process was left running"
    _nothing_left(tmp_path)


def test_agent_yaml_unpack_limit(tmp_path: Path) -> None:
    default = parse_config("server_url: http://x\ncredential_file: c\n")
    assert default.engines_max_unpacked_gib == 4
    manager = EngineManager.from_config(default, host_roots(), run_packages=RecordingRunner())
    assert manager.limits.unpacked_bytes == 4 << 30
    for value in ("0", "-1", "true", "lots", "[]"):
        with pytest.raises(
            ConfigError, match=r"agent.yaml:3: engines_max_unpacked_gib: must be a positive number"
        ):
            parse_config(
                f"server_url: http://x\ncredential_file: c\nengines_max_unpacked_gib: {value}\n"
            )
