"""`llmgw ctl fabric-test A B` through the whole command path: the CLI's
forwarding dispatcher, the API, the command stream to two real agents,
their results and the grades.

There is no RDMA device here: each agent's ib_write_bw is a stand-in
(perftest_standin/ib_write_bw) that does perftest's TCP exchange for real
and replays a real captured output, so the path is real and the numbers
are the captures'.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.collectors import Roots, make_runner
from llmgw_agent.protocol import perftest as wire
from llmgw_agent.stream import Stream

from llmgw import cli
from llmgw.fabrics import fabric_test
from llmgw.inventory.models import AgentCommand
from tests.payloads import heartbeat, registration
from tests.tokens import make_token

STANDIN = Path(__file__).parent / "perftest_standin"
FEATURES = ["heartbeat", "command:ping", *wire.FEATURES]


def port(device: str, rate: float | None = 400.0, state: str = "ACTIVE") -> dict[str, Any]:
    return {"device": device, "port": 1, "link_layer": "InfiniBand", "state": state,
            "phys_state": "LinkUp" if state == "ACTIVE" else "Polling", "rate_gbps": rate,
            "rate_text": "4X NDR", "counters": {}}  # fmt: skip


def join(make_node: Any, agent_client: Any, name: str, features: list[str], ports: list[Any]):
    node, credential = make_node(name)
    agent = agent_client(credential)
    assert agent.post("register", registration(name, features=features)).status_code == 200
    assert agent.post("heartbeat", heartbeat(name, ports=ports)).status_code == 200
    return node, credential


def sysfs(root: Path, devices: list[str]) -> Path:
    for device in devices:
        base = root / "class" / "infiniband" / device / "ports" / "1"
        base.mkdir(parents=True)
        (base / "link_layer").write_text("InfiniBand\n")
    return root


@pytest.fixture
def two_agents(asgi_server, make_node, agent_client, operator, tmp_path, monkeypatch) -> Iterator:
    monkeypatch.setenv("PATH", f"{STANDIN}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("LLMGW_URL", asgi_server)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))
    ports = [port("mlx5_0"), port("mlx5_1")]
    stop = threading.Event()
    threads = []
    for name in ("gpu-a", "gpu-b"):
        _, credential = join(make_node, agent_client, name, FEATURES, ports)
        roots = Roots(sys=sysfs(tmp_path / name, ["mlx5_0", "mlx5_1"]), run=make_runner())
        agent = Stream(asgi_server, lambda c=credential: c, roots, stop)
        threads.append(threading.Thread(target=agent.run_forever, daemon=True))
        threads[-1].start()
    yield
    stop.set()
    for t in threads:
        t.join(timeout=5)


def rows(out: str) -> dict[str, list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RAIL"))
    return {line.split()[0]: line.split() for line in lines[start + 1 :] if line[:1].isdigit()}


@pytest.mark.django_db(transaction=True)
def test_fabric_test_runs_end_to_end_through_two_real_agents_with_a_perftest_stand_in_replaying_real_captures(  # noqa: E501
    two_agents, capsys
):
    # Through `llmgw`'s own dispatcher: a missing forward would make the command
    # quietly unavailable.
    code = cli.main(["ctl", "fabric-test", "gpu-a", "gpu-b", "--duration", "1"])
    out, err = capsys.readouterr()
    # Rail 1 is degraded: the status says so, for scripts that read no table.
    assert code == 1, err
    assert out.rstrip().endswith("not ok: rail 1 (exit status 1)"), (out, err)
    assert out.splitlines()[1].split() == ["RAIL", "A", "ADAPTER", "B", "ADAPTER", "EXPECTED",
                                           "MEASURED", "GRADE"]  # fmt: skip
    got = rows(out)
    # mlx5_0 replays the NDR capture (392.34 Gb/s of 400), mlx5_1 the 100G RoCE one.
    assert got["0"] == ["0", "mlx5_0/1", "mlx5_0/1", "400.0", "Gb/s", "392.3", "Gb/s", "ok"]
    assert got["1"][-1] == "degraded" and got["1"][5] == "92.4"
    assert "rail 1: 23% of the link's rate (ok from 90%)" in out
    assert "simulated" not in out
    # One rail at a time: B serves, A is the client, B's server is stopped.
    sent = [(c.node.name, c.kind) for c in AgentCommand.objects.order_by("pk")]
    rail = [("gpu-b", wire.SERVER_START), ("gpu-a", wire.CLIENT), ("gpu-b", wire.SERVER_STOP)]
    assert sent == rail * 2
    assert all(c.state == "done" for c in AgentCommand.objects.all())


@pytest.mark.django_db
def test_an_agent_too_old_for_the_test_is_refused_at_once_naming_its_version(
    make_node, agent_client, api
):
    join(make_node, agent_client, "gpu-a", FEATURES, [port("mlx5_0")])
    join(make_node, agent_client, "gpu-old", ["heartbeat", "command:ping"], [port("mlx5_0")])
    with pytest.raises(fabric_test.Refused, match=r"gpu-old runs agent 0\.1\.0, which does not"):
        fabric_test.run("gpu-a", "gpu-old")
    response = api.post("/api/v1/fabrics/test", {"a": "gpu-old", "b": "gpu-a"}, format="json")
    assert response.status_code == 409
    assert "gpu-old runs agent 0.1.0" in response.json()["detail"]
    assert not AgentCommand.objects.exists()


@pytest.mark.django_db
def test_an_adapter_on_one_side_only_or_down_fails_its_rail_without_a_number(
    make_node, agent_client
):
    a, _ = join(make_node, agent_client, "gpu-a", FEATURES, [port("mlx5_0"), port("mlx5_1")])
    b, _ = join(make_node, agent_client, "gpu-b", FEATURES, [port("mlx5_0", state="DOWN")])
    rails = fabric_test.pair(a, b)
    # B's down port is its only one: nothing tells what it was built for.
    assert [(r.rail, r.expected_gbps, r.detail, r.down) for r in rails] == [
        ("0", None, "mlx5_0 on B is DOWN", "B"),
        ("1", None, "no mlx5_1 on B (gpu-b)", ""),
    ]
    for r in rails:
        fabric_test.grade(r)
    assert [(r.grade, r.measured_gbps) for r in rails] == [("failed", None), ("failed", None)]


@pytest.mark.django_db
def test_a_down_port_reporting_its_placeholder_rate_is_down_not_an_expected_10_gbps(
    make_node, agent_client
):
    """A down port reports 10 Gb/s (SDR), as ibstat and sysfs do: that was
    shown as the rail's EXPECTED rate. The rail is down, and the rate it
    should run at is its ports' peers' on the same fabric."""
    ports = [port("mlx5_0"), port("mlx5_1")]
    a, _ = join(make_node, agent_client, "gpu-a", FEATURES, ports)
    b, _ = join(
        make_node, agent_client, "gpu-b", FEATURES, [port("mlx5_0", 10.0, "DOWN"), ports[1]]
    )
    rails = fabric_test.pair(a, b)
    assert [(r.rail, r.expected_gbps, r.down, r.detail) for r in rails] == [
        ("0", 400.0, "B", "mlx5_0 on B is DOWN"),
        ("1", 400.0, "", ""),
    ]
    assert fabric_test._supported(b, list(b.network_ports.all()))[("mlx5_0", 1)] == 400.0
    row = {"rail": "0", "down": "B", "expected_gbps": 400.0}
    from llmgw.cli.ctl_fabrics import _expected

    assert _expected(row) == "down (B)"


@pytest.mark.django_db
def test_a_rail_trained_at_half_its_rate_is_graded_against_the_rate_it_should_run_at(
    make_node, agent_client
):
    """B's mlx5_1 trained at 200 of 400 Gb/s: measured against the slower
    end, 190 Gb/s was "ok". The link should run at 400 (the slower of the
    two ports' supported rates); the short training is itself the finding."""
    a, _ = join(make_node, agent_client, "gpu-a", FEATURES, [port("mlx5_0"), port("mlx5_1")])
    b, _ = join(make_node, agent_client, "gpu-b", FEATURES, [port("mlx5_0"), port("mlx5_1", 200.0)])
    rails = fabric_test.pair(a, b)
    assert [r.expected_gbps for r in rails] == [400.0, 400.0]
    rails[0].measured_gbps, rails[1].measured_gbps = 390.0, 190.0
    for r in rails:
        fabric_test.grade(r)
    assert [r.grade for r in rails] == ["ok", "degraded"]
    assert rails[1].detail == (
        "B's mlx5_1 trained at 200 Gb/s, where the link should run at 400 Gb/s"
    )
    # agent.yaml's declared rate is what a port was built for when it says more.
    b.fabrics = [{"name": "ib-a", "adapters": ["mlx5_0", "mlx5_1"], "rate_gbps": 800}]
    b.save(update_fields=["fabrics"])
    b.network_ports.update(declared_fabric="ib-a")
    assert fabric_test._supported(b, list(b.network_ports.all()))[("mlx5_0", 1)] == 800.0


def test_grades_against_the_links_rate():
    def graded(measured, expected):
        rail = fabric_test.Rail("0", "mlx5_0", 1, "mlx5_0", 1, expected, measured)
        fabric_test.grade(rail)
        return rail.grade

    assert graded(360.0, 400.0) == "ok"
    assert graded(359.9, 400.0) == "degraded"
    assert graded(None, 400.0) == "failed"
    assert graded(392.0, None) == "ungraded"
