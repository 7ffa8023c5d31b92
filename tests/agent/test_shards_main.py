"""The agent's loop against a real HTTP control plane: the heartbeat answer's `desired`
engines are installed (the real llama-server, packed as a release and served over HTTP),
its shards started, and later heartbeats report them ready."""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from llmgw_agent.client import HEARTBEAT
from llmgw_agent.config import parse_config
from llmgw_agent.engines import EngineManager, HostFacts
from llmgw_agent.main import run
from llmgw_agent.shards import ShardSupervisor, Timing

from tests.agent.conftest import ControlPlane
from tests.agent.engine_helpers import (
    TAG,
    RecordingRunner,
    build_llama_server,
    file_server,
    pack_release,
    sha256_of,
)
from tests.agent.helpers import host_roots
from tests.serving_models import make_tiny_gguf

pytestmark = pytest.mark.slow

PLATFORM = f"ubuntu-{ {'aarch64': 'arm64', 'arm64': 'arm64'}.get(platform.machine(), 'x64') }"
HOST = HostFacts(platform.machine(), ("avx", "avx2", "fma"), None, "debian")


def _shards(plane: ControlPlane) -> list[list[dict[str, Any]]]:
    return [r.body["shards"] for r in plane.ok(HEARTBEAT)]


def _wait(
    plane: ControlPlane, check: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for shards in _shards(plane):
            if check(shards):
                return shards
        time.sleep(0.05)
    pytest.fail(f"no heartbeat got there; the last ones: {_shards(plane)[-3:]}")


def test_the_loop_runs_the_shards_a_heartbeat_answer_asks_for(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    llama_server = build_llama_server()
    served = tmp_path / "served"
    served.mkdir()
    asset = f"llama-{TAG}-bin-{PLATFORM}.tar.gz"
    archive = pack_release(llama_server.parent, served / asset, top=f"llama-{TAG}")
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    make_tiny_gguf(model / "tiny.gguf")
    shard = {
        "id": "r7-0", "replica": 7, "rank": 0, "model": "tiny", "engine": "llama.cpp",
        "engine_version": TAG, "model_path": str(model), "source": None,
        "args": ["--ctx-size", "256"], "threads": 1, "gpus": [], "env": {}, "generation": 1,
    }  # fmt: skip
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "credential").write_text("n1.secret\n")
    config = parse_config(
        f"server_url: {control_plane.url}\nnode: n1\ncredential_file: state/credential\n"
        "stop_engines_on_exit: true\n",
        base=tmp_path,
    )
    config = replace(config, heartbeat_interval_s=0.2)
    engines = EngineManager(
        engines_dir=tmp_path / "engines", host=HOST, run_packages=RecordingRunner()
    )
    shards = ShardSupervisor(
        log_dir=tmp_path / "shard-logs", timing=Timing(poll_s=0.05, ready_check_s=0.5)
    )

    with file_server(served) as url:
        # First the shard alone: its engine is not wanted on the node yet.
        control_plane.default = {
            "state": "Ready", "register": False, "desired": {"engines": [], "shards": [shard]},
        }  # fmt: skip
        stop = threading.Event()
        thread = threading.Thread(
            target=run,
            kwargs={"config": config, "roots": host_roots(), "stop": stop,
                    "engines": engines, "shards": shards},
        )  # fmt: skip
        thread.start()
        try:
            waiting = _wait(control_plane, lambda s: bool(s))
            assert waiting[0]["state"] == "pending"
            assert (
                waiting[0]["message"] == f"waiting for llama.cpp {TAG}: not installed on this node"
            )
            assert _shards(control_plane)[0] == []  # nothing asked for before the first answer

            engine = {
                "name": "llama.cpp", "version": TAG,
                "builds": {PLATFORM: {"url": f"{url}/{asset}", "sha256": sha256_of(archive)}},
            }  # fmt: skip
            control_plane.default = {
                "state": "Ready", "register": False,
                "desired": {"engines": [engine], "shards": [shard]},
            }  # fmt: skip
            [entry] = _wait(control_plane, lambda s: bool(s) and s[0]["state"] == "ready")
            assert (entry["id"], entry["replica"], entry["generation"]) == ("r7-0", 7, 1)
            assert entry["memory_bytes"] > 0 and entry["cpu_cores"] >= 0
            heartbeat = control_plane.ok(HEARTBEAT)[-1].body
            [installed] = [e for e in heartbeat["engines"] if e["name"] == "llama.cpp"]
            assert installed["status"] == "installed"
            answer = httpx.post(
                f"{entry['url']}/v1/completions",
                json={"prompt": "hello", "max_tokens": 3},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            pid = entry["pid"]

            # The control plane takes it away: the agent stops it and stops reporting it.
            control_plane.default = {
                "state": "Ready", "register": False,
                "desired": {"engines": [engine], "shards": []},
            }  # fmt: skip
            seen = len(control_plane.ok(HEARTBEAT))
            deadline = time.monotonic() + 60
            while not any(s == [] for s in _shards(control_plane)[seen:]):
                assert time.monotonic() < deadline, _shards(control_plane)[-3:]
                time.sleep(0.05)
            with pytest.raises(ProcessLookupError):
                os.killpg(pid, 0)

            # Asked again; then the agent stops, and (stop_engines_on_exit) takes its
            # shard down with it.
            control_plane.default = {
                "state": "Ready", "register": False,
                "desired": {"engines": [engine], "shards": [{**shard, "generation": 2}]},
            }  # fmt: skip
            seen = len(control_plane.ok(HEARTBEAT))
            deadline = time.monotonic() + 60
            while not any(
                s and s[0]["state"] == "ready" and s[0]["generation"] == 2
                for s in _shards(control_plane)[seen:]
            ):
                assert time.monotonic() < deadline, _shards(control_plane)[-3:]
                time.sleep(0.05)
            pid = _shards(control_plane)[-1][0]["pid"]
        finally:
            stop.set()
            thread.join(timeout=60)
    assert not thread.is_alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
