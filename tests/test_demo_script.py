"""deploy/demo.sh's own behaviour, with every program it starts replaced by
a stand-in (tests/test_readme.py runs it whole, as a new user would): which
processes it stops for, and what a run after the first says about logging in."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Stand-ins: the long-running ones sleep like a server; the agent stops
# after a second, as one that crashed would.
STANDINS = {
    "python": """case "$1 $2" in
  "manage.py bootstrap_admin") echo "admin account 'admin' already exists: how to get in"; echo "config written";;
  "-m http.server") exec sleep 600;;
esac""",
    "llmgw": """case "$1" in
  worker|simulate) exec sleep 600;;
  ctl) echo key;;
esac""",
    "uvicorn": "exec sleep 600",
    "prometheus": "exec sleep 600",
    "curl": "exit 0",
    "llmgw-agent": "sleep 1; exit 1",
}


def _standins(bin_dir: Path) -> None:
    bin_dir.mkdir()
    for name, body in STANDINS.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)


def _wait_for(what: str, out: Path, proc: subprocess.Popen[bytes], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if what in out.read_text():
            return True
        time.sleep(0.2)
    return what in out.read_text()


def test_the_agent_stopping_leaves_the_demo_running_and_a_rerun_says_how_to_log_in(tmp_path):
    _standins(tmp_path / "bin")
    data = tmp_path / "data"
    (data / "agent").mkdir(parents=True)
    # A run before joined this machine: its credential is kept.
    (data / "agent" / "credential").write_text("kept")
    (data / "gateway-key").write_text("kept")
    out = tmp_path / "demo.out"
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LLMGW_DATA_DIR": str(data),
    }
    proc = subprocess.Popen(
        ["bash", "deploy/demo.sh"],
        cwd=ROOT,
        env=env,
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert _wait_for("Ctrl-C stops everything", out, proc, 30), out.read_text()
        text = out.read_text()
        assert "log in:                admin account 'admin' already exists: how to get in" in text
        # The agent stops a second in; the demo says so and runs on.
        assert _wait_for("this machine's agent stopped", out, proc, 15), out.read_text()
        time.sleep(1)
        assert proc.poll() is None, f"the demo stopped with its agent:\n{out.read_text()}"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Its trap stopped what it started: no stand-in server is left sleeping.
    time.sleep(0.5)
    left = subprocess.run(
        ["pgrep", "-s", str(proc.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert not left, "the demo left processes running after it stopped"
