"""The facility's demo lines on the demo as it runs: the control plane under
uvicorn, `llmgw worker` reconciling on its schedule and on every shard
change, and `llmgw simulate --serve-shards` running the twelve-node demo
fleet (racks, PDUs, power readings) whose shards get ready after their load
time. The operator's commands are `llmgw ctl`'s: scale a model to three
replicas and see them in three racks, read the PDU budget's refusal with
its three numbers, then hold a rack with --drain and watch its replicas
move out one at a time, the model never below its held count, until the
hold says the rack is drained."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from llmgw.cli import ctl
from llmgw.facility.models import Hold
from llmgw.inventory.choices import NodeState
from llmgw.inventory.models import Node
from llmgw.serving import services as serving
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica
from tests.tokens import make_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "server.example.yaml"
BIN = Path(sys.executable).parent
MODEL = "qwen2.5-7b-instruct"
NODES = 12
INTERVAL_S = 2
GONE = (ReplicaState.FAILED, ReplicaState.LOST)


class Demo:
    def __init__(self, url: str, logs: Path) -> None:
        self.url, self.logs = url, logs

    def tail(self) -> str:
        out = []
        for log in sorted(self.logs.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-15:]
            out.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def wait(self, what: str, check: Callable[[], Any], seconds: float) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if result := check():
                return result
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}: {where()}\n{self.tail()}")


def where() -> dict[int, tuple[str, str]]:
    """Each live replica of the model: (its rack, its state)."""
    out = {}
    replicas = Replica.objects.filter(model__name=MODEL).exclude(state__in=GONE)
    for r in replicas.prefetch_related("shards__node"):
        racks = {s.node.labels.get("llmgw.io/rack", "-") for s in r.shards.all()}
        out[r.pk] = (",".join(sorted(racks)), r.state)
    return out


def all_ready(count: int) -> dict[int, tuple[str, str]] | None:
    now = where()
    return now if [s for _, s in now.values()] == [ReplicaState.READY] * count else None


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


@pytest.fixture
def demo(asgi_server: str, operator: Any, tmp_path: Path, monkeypatch: Any) -> Iterator[Demo]:
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "LLMGW_DATA_DIR": str(tmp_path / "data"),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    serving.apply_catalog(EXAMPLE)
    logs = tmp_path / "logs"
    logs.mkdir()
    worker = spawn([str(BIN / "llmgw"), "worker"], env, logs / "worker.log")
    fleet = spawn(
        [str(BIN / "llmgw"), "simulate", "--server", asgi_server, "--nodes", str(NODES),
         "--nvl72-trays", "0", "--interval", str(INTERVAL_S), "--serve-shards"],
        env, logs / "simulate.log",
    )  # fmt: skip
    monkeypatch.setenv("LLMGW_URL", asgi_server)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    d = Demo(asgi_server, logs)
    try:
        d.wait(
            f"{NODES} simulated nodes, told the catalog's engines",
            lambda: (
                Node.objects.filter(simulated=True, state=NodeState.READY)
                .exclude(engines=[])
                .count()
                == NODES
            ),
            120,
        )
        yield d
    finally:
        stop(fleet)
        stop(worker)


def _moved_out(progress: str) -> int | None:
    """The replica a drain's progress line is moving out, if any: "moving
    M replica #1 out of rack r01: ...", "waiting for M replica #7 to be
    ready (...) before releasing #1 in rack r01", "moved M replica #1 out"."""
    found = re.search(r"replica #(\d+) out of |before releasing #(\d+) ", progress)
    return None if found is None else int(found.group(1) or found.group(2))


def run(capsys: Any, *argv: str) -> list[str]:
    assert ctl.main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()


def test_a_rack_held_with_drain_empties_one_replica_at_a_time(demo: Demo, capsys: Any) -> None:
    # Three replicas of a held model sit in three racks, ready on simulated nodes.
    assert run(capsys, "model", "scale", MODEL, "--always-running", "3", "--under-load", "3") == [
        f"{MODEL}: always_running 3, under_load 3"
    ]
    placed = demo.wait("three ready replicas", lambda: all_ready(3), 120)
    assert sorted(rack for rack, _ in placed.values()) == ["r01", "r02", "r03"]
    # Two more make the held rack hold more than one: its drain then takes turns.
    run(capsys, "model", "scale", MODEL, "--always-running", "6", "--under-load", "6")
    placed = demo.wait("six ready replicas", lambda: all_ready(6), 120)
    inside = {pk for pk, (rack, _) in placed.items() if rack == "r01"}
    assert len(inside) >= 2, placed
    # A budget refuses with the three numbers: the cards on PDU r01-pdu1 may draw 8.8 kW.
    explained = "\n".join(run(capsys, "explain", MODEL, "--all"))
    assert re.search(
        r"^    sim-h100-04 is in pdu r01-pdu1, which is at 8\.8 kW of its 8\.0 kW cap "
        r"\(\d+\.\d kW measured, 8\.8 kW derived, declared unknown\); "
        r"this shard adds 0\.7 kW declared$",
        explained,
        re.M,
    ), explained

    said = run(capsys, "facility", "hold", "rack=r01", "--drain", "--reason", "PDU swap")
    assert said == [
        "rack=r01 held: PDU swap; nothing new is placed there, its replicas move out one at a time"
    ]
    progress: list[str] = []
    left_in_rack: list[int] = []

    def drained() -> bool:
        now = where()
        ready = [pk for pk, (_, state) in now.items() if state == ReplicaState.READY]
        in_rack = [pk for pk, (rack, _) in now.items() if rack == "r01"]
        # Never below the held count, and one replica moving at a time.
        assert len(ready) >= 6, (now, progress)
        assert len(now) <= 7, (now, progress)
        left_in_rack.append(len(in_rack))
        text = Hold.objects.get(domain="rack=r01").progress
        if text and (not progress or progress[-1] != text):
            progress.append(text)
        return text == "drained: nothing runs in rack r01"

    demo.wait("the drain to finish", drained, 240)
    assert all(r in ("r02", "r03") for r, _ in where().values()), where()
    assert left_in_rack[0] == len(inside) and left_in_rack[-1] == 0
    assert left_in_rack == sorted(left_in_rack, reverse=True), "a replica moved back in"
    # Each replica of the rack went through: placed elsewhere, waited for, released.
    moved = [p for p in progress if p.startswith(f"moved {MODEL} replica #")]
    assert sorted(int(p.split("#")[1].split(" ")[0]) for p in moved) == sorted(inside), progress
    # One at a time: each move is finished before the next begins. The
    # progress is sampled, so a short-lived line ("moving ...") may be
    # missed; the lines about one replica are never broken by another's.
    about = [_moved_out(p) for p in progress if _moved_out(p) is not None]
    turns = [pk for i, pk in enumerate(about) if i == 0 or about[i - 1] != pk]
    assert sorted(turns) == sorted(inside), progress
    shown = run(capsys, "facility")
    # Drained, the hold stays and says so: "draining" read as still under way.
    assert any(
        line.startswith("rack=r01 ") and "held, drained: PDU swap" in line for line in shown
    ), shown
    assert "rack=r01: drained: nothing runs in rack r01" in shown
