"""Engines outlive their agent: a restarted agent takes over the engines it recorded and
still wants, stops the ones it does not, and never signals a process it did not start.

The real llama-server and the tiny model (see test_shards.py); an agent "crashes" by being
a process of its own that the test kills with SIGKILL.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from llmgw_agent.client import HEARTBEAT
from llmgw_agent.config import ConfigError, parse_config
from llmgw_agent.shards import ShardSupervisor

from tests.agent.conftest import ControlPlane
from tests.agent.helpers import HOST
from tests.agent.test_shards import DEADLINE_S, FAST, gone, ready, shard, wait_for, wait_gone

pytestmark = pytest.mark.slow


# A supervisor in a process of its own, so that the test can kill it as a crash would: it
# prints its report once every shard is as asked, then waits to be killed.
AGENT = """
import json, sys, time
from pathlib import Path
from llmgw_agent.shards import ShardSupervisor, Timing

sup = ShardSupervisor(log_dir=Path(sys.argv[1]), timing=Timing(poll_s=0.05, ready_check_s=0.5))
sup.converge(json.loads(sys.argv[2]), json.loads(sys.argv[3]))
want = sys.argv[4]
while True:
    report = sup.report()
    if report and all(e["pid"] and (want == "pid" or e["state"] == "ready") for e in report):
        print(json.dumps(report), flush=True)
        break
    time.sleep(0.05)
time.sleep(3600)
"""


def crashed_agent(
    log_dir: Path, shards: list[dict[str, Any]], engines: list[dict[str, Any]], want: str = "ready"
) -> list[dict[str, Any]]:
    """Run a supervisor until its shards are up, then SIGKILL it; its report."""
    proc = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(log_dir), json.dumps(shards), json.dumps(engines), want],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"the agent died first: {proc.wait(timeout=10)}"
        report: list[dict[str, Any]] = json.loads(line)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    return report


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (ticks since boot); None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return None if fields[0] in "ZX" else int(fields[19])


def stdout_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None


def engines_writing_to(log_dir: Path) -> list[int]:
    """The processes whose output goes to a shard log in `log_dir`: the engines there."""
    folder = os.path.realpath(log_dir) + os.sep
    return sorted(
        pid
        for pid in psutil.pids()
        if (stdout_of(pid) or "").startswith(folder) and start_time(pid) is not None
    )


class HealthWatch:
    """Asks an engine's /health every 20 ms until stopped; every answer is kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=5, trust_env=False) as http:
            while not self._stop.wait(0.02):
                try:
                    self.answers.append(http.get(f"{self.url}/health").status_code)
                except httpx.HTTPError as exc:
                    self.answers.append(type(exc).__name__)

    def stop(self) -> list[Any]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.answers


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "shards"
    try:
        yield folder
    finally:
        # Engines outlive their agents here on purpose; none outlives the test.
        for pid in engines_writing_to(folder):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_a_restarted_supervisor_takes_over_the_engine_it_started(
    engines: list[dict[str, Any]], tiny_model: Path, log_dir: Path
) -> None:
    [first] = crashed_agent(log_dir, [shard(tiny_model)], engines)
    pid, url = first["pid"], first["url"]
    watch = HealthWatch(url)
    record = json.loads((log_dir / "running" / "r12-0.json").read_text())
    assert (record["pid"], record["port"], record["shard"], record["replica"]) == (
        pid, int(url.rsplit(":", 1)[1]), "r12-0", 12,
    )  # fmt: skip
    assert record["start_time"] == start_time(pid)
    assert oct((log_dir / "running" / "r12-0.json").stat().st_mode & 0o777) == "0o600"

    sup = ShardSupervisor(log_dir=log_dir, timing=FAST)
    try:
        # Before the control plane has answered: reported as it is, nothing stopped.
        sup.converge(None, engines)
        [entry] = sup.report()
        assert (entry["state"], entry["pid"], entry["url"]) == ("ready", pid, url)
        sup.converge([shard(tiny_model)], engines)
        time.sleep(1)  # several turns of the loop, and /health checks
        entry = wait_for(sup, ready)
        assert (entry["pid"], entry["url"], entry["restarts"]) == (pid, url, 0)
        assert entry["memory_bytes"] > 0
        assert sup.history("r12-0") == [
            f"starting: taken over from an earlier agent: pid {pid}", "ready",
        ]  # fmt: skip
        assert engines_writing_to(log_dir) == [pid]
        answers = watch.stop()
        assert answers and set(answers) == {200}, answers
    finally:
        watch.stop()
        sup.close(grace_s=5)
    wait_gone(pid)
    assert not (log_dir / "running" / "r12-0.json").exists()


def test_an_engine_no_longer_wanted_is_stopped_by_the_next_supervisor(
    engines: list[dict[str, Any]], tiny_model: Path, log_dir: Path
) -> None:
    both = [shard(tiny_model), shard(tiny_model, id="r13-0", replica=13)]
    report = crashed_agent(log_dir, both, engines)
    pids = {e["id"]: e["pid"] for e in report}

    # An agent that never hears what is wanted (`--once`) leaves them be, even closing.
    sup = ShardSupervisor(log_dir=log_dir, timing=FAST)
    sup.converge(None, engines)
    time.sleep(0.5)
    sup.close(grace_s=5)
    assert not gone(pids["r12-0"]) and not gone(pids["r13-0"])

    sup = ShardSupervisor(log_dir=log_dir, timing=FAST)
    try:
        sup.converge([shard(tiny_model, id="r13-0", replica=13)], engines)
        wait_for(sup, lambda e: e == {})
        wait_gone(pids["r12-0"])
        assert sup.history("r12-0")[-2:] == ["stopping: no longer wanted", "stopped"]
        assert not (log_dir / "running" / "r12-0.json").exists()
        entry = wait_for(sup, ready, shard_id="r13-0")
        assert entry["pid"] == pids["r13-0"]
        assert engines_writing_to(log_dir) == [pids["r13-0"]]
    finally:
        sup.close(grace_s=5)


def test_an_engine_started_with_other_settings_is_restarted_with_the_wanted_ones(
    engines: list[dict[str, Any]], tiny_model: Path, log_dir: Path
) -> None:
    [first] = crashed_agent(log_dir, [shard(tiny_model)], engines)
    sup = ShardSupervisor(log_dir=log_dir, timing=FAST)
    try:
        sup.converge([shard(tiny_model, args=["--ctx-size", "256"])], engines)
        entry = wait_for(sup, lambda e: ready(e) and e["pid"] != first["pid"])
        assert "stopping: restarting: args changed since it was started" in sup.history("r12-0")
        assert psutil.Process(entry["pid"]).cmdline()[-2:] == ["--ctx-size", "256"]
        wait_gone(first["pid"])
        record = json.loads((log_dir / "running" / "r12-0.json").read_text())
        assert (record["pid"], record["spec"]["args"]) == (entry["pid"], ["--ctx-size", "256"])
    finally:
        sup.close(grace_s=5)


def test_a_recorded_pid_that_is_another_process_now_is_neither_taken_over_nor_signalled(
    engines: list[dict[str, Any]], tiny_model: Path, log_dir: Path, tmp_path: Path
) -> None:
    [first] = crashed_agent(log_dir, [shard(tiny_model)], engines)
    os.killpg(first["pid"], signal.SIGKILL)
    wait_gone(first["pid"])
    # The pid given to another process: one alive, in a session of its own (as the engine
    # was), but started at another time.
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        path = log_dir / "running" / "r12-0.json"
        record = json.loads(path.read_text())
        record["pid"] = other.pid
        path.write_text(json.dumps(record))
        sup = ShardSupervisor(log_dir=log_dir, timing=FAST)
        try:
            sup.converge([shard(tiny_model)], engines)
            entry = wait_for(sup, ready)
            assert entry["pid"] not in (other.pid, first["pid"])
            assert other.poll() is None  # not signalled
            assert json.loads(path.read_text())["pid"] == entry["pid"]
            assert not any(h.startswith("starting: taken over") for h in sup.history("r12-0"))
        finally:
            sup.close(grace_s=5)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_what_a_dead_engine_left_in_its_group_is_killed(
    engines: list[dict[str, Any]], tiny_model: Path, log_dir: Path, tmp_path: Path
) -> None:
    # A stand-in for vLLM: a leader and a worker it started (the worker holds the GPU).
    leader = tmp_path / "leader"
    leader.write_text("#!/bin/sh\nsleep 600 &\necho worker $!\nexec sleep 601\n")
    leader.chmod(0o755)
    [first] = crashed_agent(
        log_dir, [shard(tiny_model)], [{**engines[0], "path": str(leader)}], want="pid"
    )
    deadline = time.monotonic() + DEADLINE_S
    while len(engines_writing_to(log_dir)) < 2:
        assert time.monotonic() < deadline, engines_writing_to(log_dir)
        time.sleep(0.05)
    [worker] = [p for p in engines_writing_to(log_dir) if p != first["pid"]]
    assert os.getpgid(worker) == first["pid"]
    os.kill(first["pid"], signal.SIGKILL)  # the leader dies while no agent runs
    deadline = time.monotonic() + DEADLINE_S
    while start_time(first["pid"]) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sup = ShardSupervisor(log_dir=log_dir, timing=FAST)
    try:
        sup.converge([], engines)
        wait_gone(first["pid"])  # the group: the worker was its last member
        assert not psutil.pid_exists(worker) or start_time(worker) is None
        assert not (log_dir / "running" / "r12-0.json").exists()
        assert sup.report() == []
    finally:
        sup.close(grace_s=5)


def test_an_engine_no_record_names_is_left_alone_and_logged(
    engines: list[dict[str, Any]],
    tiny_model: Path,
    log_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One that looks like the agent's (its output goes to a shard log), started by hand or
    # by an agent killed between starting it and recording it.
    log_dir.mkdir()
    with open(log_dir / "r12-0.log", "ab") as out:
        stray = subprocess.Popen(["sleep", "600"], stdout=out, start_new_session=True)
    try:
        with caplog.at_level(logging.WARNING, logger="llmgw_agent.shards"):
            sup = ShardSupervisor(log_dir=log_dir, timing=FAST)
        try:
            sup.converge([shard(tiny_model)], engines)
            entry = wait_for(sup, ready)
            assert entry["pid"] != stray.pid
            assert stray.poll() is None
        finally:
            sup.close(grace_s=5)
        assert stray.poll() is None
        assert (
            f"pid {stray.pid} writes to {os.path.realpath(log_dir)}/r12-0.log, but no record "
            "says an agent started it; leaving it alone"
        ) in caplog.messages
    finally:
        stray.kill()
        stray.wait()


def test_stop_engines_on_exit_in_agent_yaml() -> None:
    text = "server_url: http://x\ncredential_file: c\n"
    assert parse_config(text).stop_engines_on_exit is False
    assert parse_config(text + "stop_engines_on_exit: true\n").stop_engines_on_exit is True
    with pytest.raises(ConfigError, match="stop_engines_on_exit: must be true or false"):
        parse_config(text + "stop_engines_on_exit: yes please\n")


# -- the agent itself, restarted and killed, against a control plane over HTTP ---------


def _heartbeats(plane: ControlPlane, since: int) -> list[list[dict[str, Any]]]:
    return [r.body["shards"] for r in plane.ok(HEARTBEAT)[since:]]


def _wait_heartbeat(plane: ControlPlane, since: int, check: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for shards in _heartbeats(plane, since):
            if check(shards):
                return shards
        time.sleep(0.05)
    pytest.fail(f"no heartbeat got there; the last ones: {_heartbeats(plane, since)[-3:]}")


def test_the_agent_restarted_or_killed_keeps_its_engine_serving(
    control_plane: ControlPlane, llama_server: Path, tiny_model: Path, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "credential").write_text("n1.secret\n")
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"server_url: {control_plane.url}\nnode: n1\ncredential_file: state/credential\n"
        f"heartbeat_interval_s: 1\nengines_dir: engines\n"
        f"engines:\n  llama.cpp:\n    path: {llama_server}\n"
        f"proc_root: {HOST / 'proc'}\nsys_root: {HOST / 'sys'}\nrootfs: {HOST / 'root'}\n"
    )
    log_dir = tmp_path / "shards"
    wanted = {"state": "Ready", "register": False,
              "desired": {"engines": [], "shards": [shard(tiny_model)]}}  # fmt: skip
    control_plane.default = wanted

    def agent(*extra: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "llmgw_agent.main", "--config", str(config), *extra],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "agent.log", "ab"),  # noqa: SIM115 - the child keeps it
        )

    def serving(shards: list[dict[str, Any]]) -> bool:
        return bool(shards) and shards[0]["state"] == "ready"

    agents: list[subprocess.Popen[bytes]] = []
    watch: HealthWatch | None = None
    try:
        agents.append(agent())
        [entry] = _wait_heartbeat(control_plane, 0, serving)
        pid, url = entry["pid"], entry["url"]
        watch = HealthWatch(url)

        # A graceful stop (an upgrade): the engine stays; the next agent takes it over,
        # and its first heartbeat already reports it ready, same process, same URL.
        agents[-1].send_signal(signal.SIGTERM)
        assert agents[-1].wait(timeout=60) == 0
        assert not gone(pid)
        since = len(control_plane.ok(HEARTBEAT))
        agents.append(agent())
        _wait_heartbeat(control_plane, since, lambda s: len(_heartbeats(control_plane, since)) >= 3)
        for shards in _heartbeats(control_plane, since):
            [entry] = shards
            assert (entry["state"], entry["pid"], entry["url"], entry["restarts"]) == (
                "ready", pid, url, 0,
            ), shards  # fmt: skip

        # Killed outright: the same.
        agents[-1].kill()
        agents[-1].wait(timeout=10)
        since = len(control_plane.ok(HEARTBEAT))
        agents.append(agent())
        _wait_heartbeat(control_plane, since, lambda s: len(_heartbeats(control_plane, since)) >= 2)
        assert all(s[0]["pid"] == pid for s in _heartbeats(control_plane, since))
        assert engines_writing_to(log_dir) == [pid]
        answers = watch.stop()
        assert answers and set(answers) == {200}, answers

        # --stop-engines: the agent takes its engine down with it.
        agents[-1].send_signal(signal.SIGTERM)
        assert agents[-1].wait(timeout=60) == 0
        agents.append(agent("--stop-engines"))
        since = len(control_plane.ok(HEARTBEAT))
        _wait_heartbeat(control_plane, since, serving)
        agents[-1].send_signal(signal.SIGTERM)
        assert agents[-1].wait(timeout=60) == 0
        assert gone(pid)
        assert engines_writing_to(log_dir) == []
    finally:
        if watch is not None:
            watch.stop()
        for proc in agents:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        for leftover in engines_writing_to(log_dir):
            os.killpg(leftover, signal.SIGKILL)
