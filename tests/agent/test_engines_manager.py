"""EngineManager without llama-server: configured engines, what is never reported, the
heartbeat fields, agent.yaml's engines keys, and the main loop carrying them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from llmgw_agent.client import HEARTBEAT
from llmgw_agent.config import ConfigError, parse_config
from llmgw_agent.engines import NO_AVX2, EngineManager, HostFacts
from llmgw_agent.main import run

from tests.agent.conftest import ControlPlane
from tests.agent.engine_helpers import RecordingRunner
from tests.agent.helpers import host_roots

AVX2 = HostFacts("x86_64", ("avx", "avx2"), None, "debian")
NO_AVX2_HOST = HostFacts("x86_64", ("sse2",), None, "debian")


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_configured_engines_are_checked_by_running_them(tmp_path: Path) -> None:
    vllm = _script(tmp_path / "vllm", 'echo "0.6.3"')
    broken = _script(tmp_path / "sglang", 'echo "ImportError: libcudart.so.12" >&2; exit 1')
    config = parse_config(
        f"server_url: http://x\ncredential_file: c\nengines_dir: {tmp_path / 'engines'}\n"
        f"engines:\n  vllm: {{path: {vllm}}}\n  sglang: {{path: {broken}}}\n"
        f"  tgi: {{path: {tmp_path / 'missing'}}}\n",
        base=tmp_path,
    )
    manager = EngineManager.from_config(config, host_roots(), run_packages=RecordingRunner())
    manager.converge([])
    assert manager.wait(60)
    report = manager.report()
    assert report["engines_probed"] is True
    by_name = {e["name"]: e for e in report["engines"]}
    assert by_name["vllm"] == {
        "name": "vllm",
        "version": "0.6.3",
        "status": "installed",
        "message": "named in agent.yaml; vllm --version: 0.6.3",
        "path": str(vllm),
    }
    assert by_name["sglang"]["status"] == "failed"
    assert by_name["sglang"]["message"] == (
        "sglang --version failed with exit status 1: ImportError: libcudart.so.12"
    )
    assert by_name["tgi"]["message"] == f"configured path {tmp_path / 'missing'} does not exist"


def test_nothing_is_reported_because_it_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "llama-server", 'echo "version: 11434 (abc)" >&2')
    _script(bin_dir / "vllm", 'echo "0.6.3"')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    manager = EngineManager(engines_dir=tmp_path / "engines", host=AVX2)
    report = manager.heartbeat([])
    assert manager.wait(60)
    report = manager.report()
    assert report == {"engines": [], "engines_probed": True, "warnings": []}


def test_probed_is_false_until_the_first_scan_is_done(tmp_path: Path) -> None:
    manager = EngineManager(engines_dir=tmp_path, host=AVX2)
    assert manager.report()["engines_probed"] is False
    manager.converge([])
    manager.wait(60)
    assert manager.report()["engines_probed"] is True


def test_a_cpu_without_avx2_is_warned_about_in_the_heartbeat(tmp_path: Path) -> None:
    manager = EngineManager(engines_dir=tmp_path, host=NO_AVX2_HOST)
    assert manager.report()["warnings"] == [NO_AVX2]


def test_a_node_no_build_fits_says_so(tmp_path: Path) -> None:
    manager = EngineManager(engines_dir=tmp_path, host=HostFacts("aarch64", (), None, "debian"))
    spec = {
        "name": "llama.cpp",
        "version": "b11434",
        "builds": {"ubuntu-x64": {"url": "http://127.0.0.1:9/x.tar.gz", "sha256": "a" * 64}},
    }
    manager.converge([spec])
    assert manager.wait(60)
    assert manager.report()["engines"] == [
        {
            "name": "llama.cpp",
            "version": "b11434",
            "status": "failed",
            "message": "no build for arm64 on debian; offered: ubuntu-x64",
            "path": None,
        }
    ]


def test_builds_offered_later_are_chosen_at_once(tmp_path: Path) -> None:
    """Offered nothing for its platform, then a build (a mirror was added):
    the node chooses again at once, not after the retry interval."""
    manager = EngineManager(engines_dir=tmp_path, host=HostFacts("aarch64", (), None, "debian"))
    manager.converge([{"name": "llama.cpp", "version": "b11434", "builds": {}}])
    assert manager.wait(60)
    assert (
        manager.report()["engines"][0]["message"]
        == "no build for arm64 on debian; offered: nothing"
    )
    arm = {
        "ubuntu-arm64": {
            "url": "http://127.0.0.1:9/llama-b11434-bin-ubuntu-arm64.tar.gz",
            "sha256": "a" * 64,
        }
    }
    manager.converge([{"name": "llama.cpp", "version": "b11434", "builds": arm}])
    assert manager.wait(60)
    [entry] = manager.report()["engines"]
    # It tried the new build (nothing listens on port 9): not the old "no build".
    assert "no build" not in entry["message"] and entry["status"] == "failed"


def test_agent_yaml_engines_keys(tmp_path: Path) -> None:
    config = parse_config(
        "server_url: http://x\ncredential_file: c\nengines_dir: engines\n"
        "engines:\n  vllm:\n    path: /opt/vllm/bin/vllm\n",
        base=tmp_path,
    )
    assert config.engines_dir == tmp_path / "engines"
    assert [(e.name, str(e.path)) for e in config.engines] == [("vllm", "/opt/vllm/bin/vllm")]
    default = parse_config("server_url: http://x\ncredential_file: c\n")
    assert default.engines == () and str(default.engines_dir) == "/var/lib/llmgw-agent/engines"
    for text, error in [
        ("engines:\n  vllm: {path: vllm}\n", "engines.vllm.path: must be an absolute path"),
        ("engines:\n  vllm: {bin: /x}\n", "agent.yaml:4: engines.vllm.bin: unknown key"),
        ("engines:\n  vllm: {}\n", "engines.vllm: path is required"),
    ]:
        with pytest.raises(ConfigError, match=error):
            parse_config(f"server_url: http://x\ncredential_file: c\n{text}")


def test_the_heartbeat_carries_the_engine_fields(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "credential").write_text("n1.secret")
    config = parse_config(
        f"server_url: {control_plane.url}\nnode: n1\ncredential_file: state/credential\n",
        base=tmp_path,
    )
    manager = EngineManager(engines_dir=tmp_path / "engines", host=NO_AVX2_HOST)
    manager.converge([])
    manager.wait(60)
    assert run(config, once=True, roots=host_roots(), engines=manager) == 0
    beat = control_plane.ok(HEARTBEAT)[0].body
    assert beat["engines"] == []
    assert beat["engines_probed"] is True
    assert beat["warnings"] == [NO_AVX2]
