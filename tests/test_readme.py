"""Every command the README shows, run against the demo it describes.

`deploy/demo.sh` (what `make demo` runs) is started as a new user would
start it: the embedded default (its own PostgreSQL, in-process tasks), this machine's
real agent, the simulated fleet and the tiny model held on real parts. Each
shell command in the README's code blocks is then run as written, and the
claim the README makes beside it is checked. A command the README gains
without a check here fails the test, so the README cannot drift into
saying something the product does not do.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmgw import embedded_db
from tests.embedded import reachable
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
SIM_NODES = 12
TRAYS = 18  # the simulator's default NVL72 rack
FLEET = SIM_NODES + TRAYS + 1  # and this machine

pytestmark = [pytest.mark.slow, pytest.mark.llama_server]


def readme_commands() -> list[tuple[str, str]]:
    """(command, claim) for every line of the README's sh blocks, a
    continued line joined to the one before it."""
    out: list[tuple[str, str]] = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S):
        pending = ""
        for line in block.splitlines():
            if pending:
                pending += "\n" + line
                if line.rstrip().endswith("'"):
                    out.append((pending, ""))
                    pending = ""
                continue
            if not line.strip() or line.startswith("#"):
                continue
            if line.startswith("python -c"):
                pending = line
                continue
            command, _, claim = line.partition("  #")
            # A subshell is one command; otherwise "a; b" is two.
            parts = [command] if command.startswith("(") else command.split("; ")
            for part in parts:
                out.append((part.strip(), claim.strip()))
    return out


class Demo:
    def __init__(self, data: Path, url: str, env: dict[str, str]) -> None:
        self.data, self.url, self.env = data, url, env

    def run(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A README command as a user types it, from the checkout, with the
        demo's CLI configuration exported the way the README says."""
        return subprocess.run(
            ["bash", "-c", command.replace(".venv/bin/", f"{BIN}/")],
            cwd=self.data,
            env={**self.env, "LLMGW_CONFIG": str(self.data / "cli.yaml")},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, command: str, timeout: float = 60) -> str:
        done = self.run(command, timeout)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout

    def api(self, path: str) -> Any:
        import yaml

        token = yaml.safe_load((self.data / "cli.yaml").read_text())["token"]
        r = httpx.get(f"{self.url}{path}", headers={"Authorization": f"Token {token}"}, timeout=30)
        r.raise_for_status()
        return r.json()

    def nodes(self) -> list[dict[str, Any]]:
        body = self.api("/api/v1/nodes/")
        return body["results"] if isinstance(body, dict) else body


def _wait(what: str, check: Callable[[], bool], seconds: float, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(1)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(log.glob("*.log")))
    raise AssertionError(f"the demo never had {what} within {seconds:.0f} s\n{logs}")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    data = reachable(tmp_path_factory.mktemp("demo"))
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "LLMGW_CONFIG")
    }
    env.update(
        PATH=f"{BIN}:{env.get('PATH', '')}",
        LLMGW_DATA_DIR=str(data),
        LLMGW_PORT=str(port),
        LLMGW_MIRROR_PORT=str(free_port()),
        LLMGW_PROMETHEUS_PORT=str(free_port()),
        LLMGW_ADMIN_PASSWORD="a-long-demo-password",
    )
    proc = subprocess.Popen(
        ["bash", "deploy/demo.sh"],
        cwd=ROOT,
        env=env,
        stdout=(data / "demo.out").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    d = Demo(data, f"http://127.0.0.1:{port}", env)
    try:
        logs = data / "log"
        _wait("its CLI configuration", lambda: (data / "cli.yaml").exists(), 180, data)
        _wait(
            f"{FLEET} nodes, every simulated one told its desired state",
            lambda: (
                len(nodes := d.nodes()) >= FLEET
                and all(n.get("engines") for n in nodes if n["name"].startswith("sim-"))
            ),
            240,
            logs,
        )
        yield d
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            # The agent stops its engines before it exits, after the heartbeat in
            # flight (10 s timeout), its supervisor's loop and each engine's grace: on
            # a loaded machine that has passed 30 s. A demo that does not stop at all
            # is a failure of its own, not "engines outlived it".
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the demo did not stop within 90 s of SIGTERM") from None
        # Engines outlive an agent by default; the demo's must end with the demo.
        shards = os.path.realpath(data / "agent" / "shards") + os.sep
        left = [pid for pid in _pids() if (_stdout(pid) or "").startswith(shards)]
        assert not left, f"the demo's engines outlived it: pids {left}"
        assert not embedded_db.is_running(data), "the demo's database outlived it"


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _stdout(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None


def check_nodes(demo: Demo, out: str, claim: str) -> None:
    header, *rows = out.strip().split("\n\n")[0].splitlines()
    assert header.split() == "NAME STATE CPUS MEM DISK GPUS LOCATION LABELS".split(), header
    names = {row.split()[0] for row in rows}
    assert len(names) >= FLEET and socket.gethostname().split(".")[0] in names
    # Unknown is "-", never 0: the CPU servers have no GPUs to count, but a
    # node that has not said is the only "-" allowed, and none is here.
    assert all(" 0 B " not in row for row in rows)


def check_status(demo: Demo, out: str, claim: str) -> None:
    assert re.search(rf"^nodes\s+{FLEET} \({FLEET} Ready", out, re.M), out


def check_explain_refused(demo: Demo, out: str, claim: str) -> None:
    # "every node refused, each reason once: its nodes counted, the first
    # named, and one node's number that bit"
    assert "cannot be placed" in out and "placed as profile" not in out, out
    fleet = len(demo.nodes())
    attempts = re.split(r"^profile .*\n", out, flags=re.M)[1:]
    assert attempts, out
    for attempt in attempts:
        lines = attempt.splitlines()
        groups = [
            (i, m) for i, ln in enumerate(lines) if (m := re.match(r"  (\d+) nodes?: .+: \S", ln))
        ]
        assert sum(int(m[1]) for _, m in groups) == fleet, attempt
        for i, _ in groups:
            example = lines[i + 1]
            assert re.match(
                r"    e\.g\. .*has [\d.]+ \w+B of memory, needs [\d.]+ \w+B", example
            ), example


def check_explain_nvlink(demo: Demo, out: str, claim: str) -> None:
    # "placed inside the NVLink domain, and why"
    placed = re.search(r"placed as profile \S+ across nvlink:(\S+)", out)
    assert placed, out
    domain = next(d for d in demo.api("/api/v1/nvlink")["domains"] if d["id"] == placed[1])
    joined = {t["node"] for t in domain["trays"] if t["joined"]}
    # "  sim-gb200-t01 (-/hall1/row01/r02:r02-pdu0): GPUs 0,1,2,3, ...": the node, where it sits.
    nodes = re.findall(r"^  (\S+)(?: \([^)]*\))?: GPUs", out, re.M)
    assert len(nodes) == 4 and set(nodes) <= joined, (nodes, joined)
    assert f"inside NVLink domain {placed[1]}: all 4 nodes have every card joined" in out, out


def check_fabrics(demo: Demo, out: str, claim: str) -> None:
    for fabric in ("ib-a", "ib-b", "ib-c"):
        assert fabric in out, out


def check_nvlink(demo: Demo, out: str, claim: str) -> None:
    assert "17/18 trays joined" in out and "sim-gb200-t07 held out" in out, out


def check_fabric_test(demo: Demo, out: str, claim: str) -> None:
    # "ib_write_bw rail by rail through both agents, each rail graded"
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RAIL"))
    rows = [line.split() for line in lines[header + 1 : header + 9]]
    assert [r[0] for r in rows] == [str(n) for n in range(8)], out
    assert all(r[-1] in ("ok", "degraded", "failed") for r in rows), out
    # "exits 1 here: rail 3 trained at 200 of 400 Gb/s" (the status: see EXITS)
    assert rows[3][-1] == "degraded" and rows[3][3] == "400.0", out
    assert "rail 3: B's mlx5_3 trained at 200 Gb/s" in out, out
    # The demo's numbers are the simulator's, and the table says so.
    assert "simulated: these nodes are simulated and so are their numbers" in out, out


QWEN, DEEPSEEK = "qwen2.5-7b-instruct", "deepseek-v3-671b"


def live_replicas(demo: Demo, model: str) -> list[dict[str, Any]]:
    body = demo.api(f"/api/v1/models/{model}/")
    return [r for r in body["replicas"] if r["state"] not in ("failed", "lost")]


def rack_of(replica: dict[str, Any]) -> str:
    # location is "site/room/row/rack:pdu", "-" for a level not set.
    return replica["nodes"][0]["location"].split(":")[0].split("/")[3]


def check_scale_qwen(demo: Demo, out: str, claim: str) -> None:
    # "three replicas, in three racks"
    assert out.strip() == f"{QWEN}: always_running 3, under_load 3", out

    def three() -> bool:
        live = live_replicas(demo, QWEN)
        return len(live) == 3 and all(r["state"] == "ready" for r in live)

    _wait("three ready replicas of qwen", three, 180, demo.data / "log")
    racks = sorted(rack_of(r) for r in live_replicas(demo, QWEN))
    assert racks == ["r01", "r02", "r03"], racks


def check_explain_power(demo: Demo, out: str, claim: str) -> None:
    # "where each sits; PDU r01-pdu1 refused with its three numbers"
    assert re.search(r"^  \S+ \(-/hall1/row\d+/r0\d:r0\d-pdu\d\): GPUs", out, re.M), out
    assert re.search(
        r"is in pdu r01-pdu1, which is at [\d.]+ kW of its 8\.0 kW cap \(([\d.]+ kW|unknown) "
        r"measured, ([\d.]+ kW|unknown) derived, (declared unknown|[\d.]+ kW declared)\); "
        r"this shard adds 0\.7 kW declared$",
        out,
        re.M,
    ), out


def check_hold(demo: Demo, out: str, claim: str) -> None:
    # "its replicas move out one at a time": never below the held count, until none is left.
    assert out.strip() == (
        "rack=r01 held: PDU swap; nothing new is placed there, its replicas move out one at a time"
    ), out

    def drained() -> bool:
        live = live_replicas(demo, QWEN)
        assert sum(r["state"] == "ready" for r in live) >= 3 and len(live) <= 4, live
        return (
            demo.ok(".venv/bin/llmgw ctl facility").count("drained: nothing runs in rack r01") > 0
        )

    _wait("rack r01 drained", drained, 300, demo.data / "log")
    assert all(rack_of(r) in ("r02", "r03") for r in live_replicas(demo, QWEN))


def check_facility(demo: Demo, out: str, claim: str) -> None:
    # "each domain's nodes, hold, cap and draw, and the drain's progress"
    assert re.search(r"^rack=r01 .*held, drained: PDU swap", out, re.M), out
    assert re.search(r"^pdu=r01-pdu1 .*8\.0 kW", out, re.M), out
    # Its cards may draw 8.8 kW against the 8.0 kW cap: marked, and said below.
    assert re.search(r"^pdu=r01-pdu1 .*OVER CAP", out, re.M), out
    assert re.search(
        r"^pdu=r01-pdu1: over its cap: at [\d.]+ kW of its 8\.0 kW cap \([\d.]+ kW over\)",
        out,
        re.M,
    ), out
    assert "rack=r01: drained: nothing runs in rack r01" in out, out


def check_release(demo: Demo, out: str, claim: str) -> None:
    assert "rack=r01 released" in out, out


def check_scale_deepseek(demo: Demo, out: str, claim: str) -> None:
    # "one replica over four NVL72 trays"
    assert out.strip() == f"{DEEPSEEK}: always_running 1, under_load 1", out
    _wait(
        "deepseek placed", lambda: len(live_replicas(demo, DEEPSEEK)) == 1, 120, demo.data / "log"
    )
    nodes = [n["node"] for n in live_replicas(demo, DEEPSEEK)[0]["nodes"]]
    assert len(nodes) == 4 and all(n.startswith("sim-gb200-t") for n in nodes), nodes


def check_sweep(demo: Demo, out: str, claim: str) -> None:
    # "every rack and PDU failed in turn: rack=nvl72-a and this machine's rack would leave a
    # held model short"
    first, *named = out.strip().splitlines()
    assert re.match(
        r"failed \d+ domains \(rack, pdu\) one at a time: [1-9]\d* would hurt", first
    ), out
    # Only the NVL72 rack runs deepseek: losing it leaves the model with none.
    lines = [ln.strip() for ln in named]
    line = next((ln for ln in lines if ln.startswith("rack=nvl72-a:")), "")
    assert f"below always_running: {DEEPSEEK} 0/1" in line, out
    # And this machine's rack: tiny-llama runs on its one real node only.
    line = next((ln for ln in lines if ln.startswith("rack=demo:")), "")
    assert "below always_running: tiny-llama 0/1" in line, out


def check_cordon(demo: Demo, out: str, claim: str) -> None:
    node = demo.ok(".venv/bin/llmgw ctl node sim-h100-01")
    assert "XID 79 on GPU 3" in node, node


def check_openai(demo: Demo, out: str, claim: str) -> None:
    assert "ChatCompletion(" in out and "tiny-llama" in out, out


def check_node_add(demo: Demo, out: str, claim: str) -> None:
    # "the token works once, for 24 h": the file holds the token and nothing else.
    # ... and only its owner may read it.
    assert (demo.data / "token").stat().st_mode & 0o777 == 0o600
    token = (demo.data / "token").read_text().strip()
    assert re.fullmatch(r"[A-Za-z0-9_\-.]+", token), token
    join = {"schema": 1, "node": "gpu-a-01", "token": token}
    first = httpx.post(f"{demo.url}/api/agent/v1/join", json=join, timeout=30)
    again = httpx.post(f"{demo.url}/api/agent/v1/join", json=join, timeout=30)
    assert first.status_code == 200, first.text
    assert again.status_code in (401, 403), again.text


CHECKS: dict[str, Callable[[Demo, str, str], None]] = {
    "export LLMGW_CONFIG=var/cli.yaml": lambda *_: None,  # the test exports the demo's own
    ".venv/bin/llmgw ctl nodes": check_nodes,
    ".venv/bin/llmgw ctl status": check_status,
    ".venv/bin/llmgw ctl explain deepseek-r1-671b-cpu": check_explain_refused,
    ".venv/bin/llmgw ctl explain deepseek-v3-671b": check_explain_nvlink,
    ".venv/bin/llmgw ctl fabrics": check_fabrics,
    ".venv/bin/llmgw ctl nvlink": check_nvlink,
    ".venv/bin/llmgw ctl fabric-test sim-h100-01 sim-h100-04": check_fabric_test,
    f".venv/bin/llmgw ctl model scale {QWEN} --always-running 3 --under-load 3": check_scale_qwen,
    f".venv/bin/llmgw ctl explain {QWEN} --all": check_explain_power,
    '.venv/bin/llmgw ctl facility hold rack=r01 --drain --reason "PDU swap"': check_hold,
    ".venv/bin/llmgw ctl facility": check_facility,
    ".venv/bin/llmgw ctl facility release rack=r01": check_release,
    f".venv/bin/llmgw ctl model scale {DEEPSEEK} --always-running 1 --under-load 1": (
        check_scale_deepseek
    ),
    ".venv/bin/llmgw ctl whatif sweep": check_sweep,
    '.venv/bin/llmgw ctl cordon sim-h100-01 --reason "XID 79 on GPU 3"': check_cordon,
    "(umask 077; llmgw node add gpu-a-01 > token)": check_node_add,
}
# The exit status a README command ends with where it is not 0, and why.
EXITS = {
    # the demo's sim-h100-04 has a cable trained short: a rail not ok exits 1
    ".venv/bin/llmgw ctl fabric-test sim-h100-01 sim-h100-04": 1,
}
# Shown but not run here, each for its reason.
NOT_RUN = {
    "make demo": "this test runs deploy/demo.sh, which is what it runs",
    "make test": "this test is part of it",
    "pip install ./agent": "an install step on another machine",
    "llmgw-agent --config /etc/llmgw-agent/agent.yaml": "a node's own configuration",
}


def test_every_readme_command_is_checked() -> None:
    commands = readme_commands()
    assert len(commands) >= 10
    for command, _ in commands:
        known = command in CHECKS or command in NOT_RUN or command.startswith("python -c")
        assert known, f"the README shows {command!r}, which no test checks"


def test_readme_commands_do_what_it_says(demo: Demo) -> None:
    commands = readme_commands()
    for command, claim in commands:
        if command in NOT_RUN or command.startswith("python -c"):
            continue
        # `llmgw node add` runs beside the control plane, as "Onboarding" shows.
        typed = f".venv/bin/{command}" if command.startswith("llmgw ") else command
        if command in EXITS:
            done = demo.run(typed)
            assert done.returncode == EXITS[command], f"{command}\n{done.stdout}\n{done.stderr}"
            out = done.stdout
        else:
            out = demo.ok(typed)
        CHECKS[command](demo, out, claim)


def test_demo_prints_this_machines_doctor_checks(demo: Demo) -> None:
    """make demo runs llmgw doctor on this machine once its agent has joined, and
    prints every check with its result (a failing one is news, not a stop)."""
    out = (demo.data / "demo.out").read_text()
    assert "llmgw doctor on this machine:" in out, out
    report = out.split("llmgw doctor on this machine:", 1)[1]
    assert re.search(r"^CHECK\s+RESULT\s+DETAIL", report, re.M), report
    for check in ("ib ports", "subnet manager", "engines", "model filesystems", "clock skew"):
        assert re.search(rf"^{check}\s+(OK|WARN|FAIL|UNKNOWN)\s+\S", report, re.M), report
    # It reached the control plane with the agent's credential: the record answered.
    assert re.search(r"^credential\s+OK\s", report, re.M), report


def test_readme_openai_snippet_answers(demo: Demo) -> None:
    """The held tiny model, on this machine's real llama-server, answers the
    README's snippet once its engine is installed (the demo builds and packs
    it from the catalog's package source in the background)."""
    snippet = next(c for c, _ in readme_commands() if c.startswith("python -c"))
    snippet = snippet.replace('open("var/gateway-key")', f'open("{demo.data}/gateway-key")')
    # `python` is the virtualenv's: the demo's PATH starts with it, as make demo's does.
    snippet = snippet.replace("http://127.0.0.1:8000", demo.url)

    def ready() -> bool:
        models = demo.api("/api/v1/models/")
        rows = models["results"] if isinstance(models, dict) else models
        tiny = next((m for m in rows if m["name"] == "tiny-llama"), None)
        return bool(tiny) and any(r["state"] == "ready" for r in tiny["replicas"])

    _wait("tiny-llama ready", ready, 420, demo.data / "log")
    check_openai(demo, demo.ok(snippet, timeout=120), "")
