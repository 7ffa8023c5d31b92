"""llmgw-agent end to end: --print on this machine, --once and the loop against a server."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from llmgw_agent.client import HEARTBEAT, JOIN, REGISTER
from llmgw_agent.config import AgentConfig, parse_config
from llmgw_agent.main import main, run

from tests.agent.conftest import ControlPlane
from tests.agent.helpers import host_roots

REPO = Path(__file__).parents[2]
EXAMPLE = REPO / "agent" / "agent.example.yaml"


def test_print_with_the_shipped_example() -> None:
    # The installed console script when present, else the module: both are the same main.
    exe = shutil.which("llmgw-agent", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "llmgw_agent.main"]
    done = subprocess.run(
        [*cmd, "--print", "--config", str(EXAMPLE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["register"]["node"] == "gpu-a-01"
    assert out["register"]["system"]["cpus"] >= 1
    assert out["heartbeat"]["memory"]["available_bytes"] > 0
    assert all(c["ok"] for c in out["heartbeat"]["collectors"])


def test_bad_config_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("server_url: http://x\ncredential_file: c\nheartbeat: 5\n")
    assert main(["--print", "--config", str(path)]) == 2
    assert f"{path}:3: heartbeat: unknown key" in capsys.readouterr().err


def _config(tmp_path: Path, url: str, extra: str = "") -> AgentConfig:
    text = f"server_url: {url}\nnode: n1\ncredential_file: state/credential\n{extra}"
    return parse_config(text, base=tmp_path)


def test_once_joins_registers_and_heartbeats(control_plane: ControlPlane, tmp_path: Path) -> None:
    control_plane.script[JOIN] = [{"node": "n1", "credential": "n1.secret"}]
    # The control plane lost the registration: the agent must send it again.
    control_plane.script[HEARTBEAT] = [{"state": "Ready", "register": True}]
    config = _config(tmp_path, control_plane.url, "join_token: tok\nheartbeat_interval_s: 5\n")
    assert run(config, once=True, roots=host_roots()) == 0
    assert [r.path for r in control_plane.received] == [JOIN, REGISTER, HEARTBEAT, REGISTER]
    credential = tmp_path / "state" / "credential"
    assert stat.S_IMODE(credential.stat().st_mode) == 0o600
    register = control_plane.ok(REGISTER)[0].body
    assert register["features"] == ["heartbeat", "filesystems", "weights"]
    assert register["probed"] is True and register["heartbeat_interval_s"] == 5
    assert register["system"]["memory_total_bytes"] == 24683652 * 1024
    heartbeat = control_plane.ok(HEARTBEAT)[0]
    assert heartbeat.headers["Authorization"] == "Node n1.secret"
    assert heartbeat.body["weights"] == {"probed": False, "models": []}
    assert "filesystems" not in heartbeat.body


def test_no_credential_and_no_token_exits_2(control_plane: ControlPlane, tmp_path: Path) -> None:
    assert run(_config(tmp_path, control_plane.url), once=True, roots=host_roots()) == 2
    assert control_plane.received == []


def test_loop_survives_an_outage(control_plane: ControlPlane, tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "credential").write_text("n1.secret\n")
    control_plane.script[HEARTBEAT] = ["drop", 503, 500]
    # Faster than agent.yaml allows, so the test takes a moment rather than minutes.
    config = replace(_config(tmp_path, control_plane.url), heartbeat_interval_s=0.05)
    stop = threading.Event()
    thread = threading.Thread(
        target=run, kwargs={"config": config, "roots": host_roots(), "stop": stop}
    )
    thread.start()
    deadline = time.monotonic() + 20
    while len(control_plane.ok(HEARTBEAT)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(control_plane.ok(REGISTER)) == 1
    assert len(control_plane.ok(HEARTBEAT)) >= 2


def test_loop_sends_back_the_desired_digest_and_keeps_what_it_took(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "credential").write_text("n1.secret\n")
    shard = {
        "id": "r7-0", "replica": 7, "rank": 0, "model": "tiny", "engine": "llama.cpp",
        "engine_version": "b1", "model_path": None, "source": None, "args": [],
        "threads": 1, "gpus": [], "env": {}, "generation": 1,
    }  # fmt: skip
    digest = "ab" * 32
    control_plane.script[HEARTBEAT] = [
        {"state": "Ready", "register": False, "desired_digest": digest,
         "desired": {"engines": [], "shards": [shard]}},
    ]  # fmt: skip
    # After that, answers without the desired state: it is unchanged.
    control_plane.default = {"state": "Ready", "register": False, "desired_digest": digest}
    config = replace(_config(tmp_path, control_plane.url), heartbeat_interval_s=0.05)
    stop = threading.Event()
    thread = threading.Thread(
        target=run, kwargs={"config": config, "roots": host_roots(), "stop": stop}
    )
    thread.start()
    deadline = time.monotonic() + 20
    while len(control_plane.ok(HEARTBEAT)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(timeout=10)
    beats = [r.body for r in control_plane.ok(HEARTBEAT)]
    assert len(beats) >= 4
    assert "desired_digest" not in beats[0]  # just started: holds nothing
    assert all(beat["desired_digest"] == digest for beat in beats[1:])
    # Answers without `desired` leave the shard wanted: it is still reported.
    assert [s["id"] for s in beats[-1]["shards"]] == ["r7-0"]
