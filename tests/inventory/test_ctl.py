"""`llmgw ctl` against a live server, the way an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.cli import ctl
from tests.payloads import heartbeat, registration
from tests.tokens import make_token


@pytest.fixture
def ctl_env(live_server, operator, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))


def columns(out: str) -> dict[str, dict[str, str]]:
    """A table's rows by their first cell, each cell under its header: cells
    may hold spaces ("1.48 TiB"), so columns are cut where headers start."""
    header, *lines = out.split("\n\n")[0].splitlines()
    names = header.split()
    starts = [header.index(n) for n in names] + [None]
    rows = {}
    for line in lines:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:], strict=False)]
        rows[cells[0]] = dict(zip(names, cells, strict=True))
    return rows


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = ctl.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.django_db(transaction=True)
def test_ctl_nodes_shows_dashes_for_unknown(make_node, agent_client, ctl_env, capsys):
    _, known = make_node("gpu-1")
    agent_client(known).post("register", registration("gpu-1"))
    agent_client(known).post("heartbeat", heartbeat("gpu-1"))
    _, old = make_node("old-agent")
    agent_client(old).post("register", registration("old-agent", labels={}, system={}))
    payload = heartbeat("old-agent")
    del payload["filesystems"]
    agent_client(old).post("heartbeat", payload)

    code, out, _ = run(capsys, "nodes")
    assert code == 0
    rows = columns(out)
    assert list(rows["gpu-1"]) == [
        "NAME",
        "STATE",
        "CPUS",
        "MEM",
        "DISK",
        "GPUS",
        "LOCATION",
        "LABELS",
    ]
    # Binary units with their names: 1623497637888 bytes is 1.48 TiB. The
    # rack label is the location's (site/room/row/rack, "-" for a level
    # not set), not repeated among the labels.
    assert list(rows["gpu-1"].values()) == [
        "gpu-1",
        "Ready",
        "192",
        "1.48 TiB",
        "600 GiB/1000 GiB",
        "-",
        "-/-/-/r1",
        "-",
    ]
    assert list(rows["old-agent"].values()) == ["old-agent", "Ready", "-", "-", "-", "-", "-", "-"]


@pytest.mark.django_db(transaction=True)
def test_ctl_cordon_and_status(make_node, agent_client, ctl_env, capsys):
    _, credential = make_node("gpu-1")
    agent_client(credential).post("register", registration("gpu-1"))
    agent_client(credential).post("heartbeat", heartbeat("gpu-1"))
    code, out, _ = run(capsys, "cordon", "gpu-1", "--reason", "fan failure")
    assert code == 0 and "fan failure" in out
    _, out, _ = run(capsys, "nodes")
    assert "Ready,Cordoned" in out
    _, out, _ = run(capsys, "status")
    assert "1 (1 Ready, 0 NotReady, 1 cordoned)" in out
    assert "qwen2.5-7b on 1 node(s)" in out
    code, _, err = run(capsys, "cordon", "nope", "--reason", "x")
    assert code == 1 and "404" in err
    assert run(capsys, "uncordon", "gpu-1")[0] == 0


def test_ctl_says_what_is_missing(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("LLMGW_URL", raising=False)
    monkeypatch.delenv("LLMGW_TOKEN", raising=False)
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "cli.yaml"))
    code, _, err = run(capsys, "nodes")
    assert code == 1 and "LLMGW_URL" in err


@pytest.mark.django_db(transaction=True)
def test_ctl_node_and_status_name_their_units(make_node, agent_client, ctl_env, capsys):
    _, credential = make_node("gpu-1")
    agent_client(credential).post("register", registration("gpu-1"))
    agent_client(credential).post("heartbeat", heartbeat("gpu-1"))
    _, out, _ = run(capsys, "node", "gpu-1")
    assert "600 GiB/1000 GiB" in out and "500 TiB/900 TiB" in out
    _, out, _ = run(capsys, "status")
    assert "memory    1.48 TiB" in out
    # Free and total that round alike on their own are printed apart.
    almost = heartbeat("gpu-1")
    almost["filesystems"][0]["free_bytes"] = 1000 * 2**30 - 2**26
    agent_client(credential).post("heartbeat", almost)
    free, total = columns(run(capsys, "nodes")[1])["gpu-1"]["DISK"].split("/")
    assert free != total and free.endswith(" GiB") and total.endswith(" GiB")


@pytest.mark.django_db(transaction=True)
def test_ctl_model_resources_prints_gib(ctl_env, operator, capsys):
    from llmgw.accounts import roles
    from llmgw.catalog import services as catalog

    roles.grant(operator, roles.ADMIN)  # a model's resources are the catalog's

    catalog.apply_text(
        "models:\n  - name: m\n    source: hf://x/m\n    profiles:\n"
        "      - name: cpu\n        memory_gb: 8\n        cpu_cores: 2\n"
    )
    code, out, err = run(capsys, "model", "resources", "m", "--memory-gb", "1.5")
    assert code == 0, err
    assert out.strip() == "m/cpu: memory 1.50 GiB, 2 cores"


def test_explanation_prints_a_shard_memory_in_gib():
    # The server renders the lines the CLI prints.
    from llmgw.placement.explaining import lines

    text = "\n".join(
        lines(
            {
                "model": "m",
                "decision": {
                    "profile": "cpu",
                    "fabric": None,
                    "shards": [
                        {
                            "node": "cpu-1",
                            "gpus": [],
                            "cpu_cores": 4,
                            "memory_bytes": 15 * 2**30,
                            "adapters": [],
                        }
                    ],
                },
                "attempts": [],
            }
        )
    )
    assert "cpu-1: GPUs -, 4 cores, 15.0 GiB" in text


def test_ctl_into_a_closed_pipe_exits_without_a_traceback(asgi_server, operator, tmp_path):
    """`llmgw ctl nodes | head -1` once head has exited: the installed
    command, in a process of its own, against a real server. The pipe's
    reading end is closed before it starts, so its write always fails."""
    from llmgw.inventory import services

    for i in range(3):
        services.add_node(f"n{i}", "test")
    env = {
        **os.environ,
        "LLMGW_URL": asgi_server,
        "LLMGW_TOKEN": make_token(operator),
        "LLMGW_CONFIG": str(tmp_path / "absent.yaml"),
    }
    llmgw = Path(sys.executable).with_name("llmgw")
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [str(llmgw), "ctl", "nodes"], stdout=write, stderr=subprocess.PIPE, env=env, timeout=60
        )
    finally:
        os.close(write)
    assert done.stderr.decode() == ""
    assert done.returncode == 141
