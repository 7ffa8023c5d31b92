"""`llmgw ctl` against a live server, the way an operator runs it."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from llmgw.cli import ctl
from tests.payloads import heartbeat, registration


@pytest.fixture
def ctl_env(live_server, operator, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", Token.objects.create(user=operator).key)
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))


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
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "CPUS", "MEM", "DISK", "GPUS", "LABELS"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["gpu-1"] == ["gpu-1", "Ready", "192", "1.5T", "600G/1000G", "-", "llmgw.io/rack=r1"]
    assert rows["old-agent"] == ["old-agent", "Ready", "-", "-", "-", "-", "-"]


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
