"""`make demo`'s `llmgw ctl fabric-test sim-h100-01 sim-h100-04`: simulated
nodes answer the fabric test over their real command streams with simulated
numbers, said so, and the CLI prints a graded table."""

from __future__ import annotations

import threading

import msgspec
import pytest
from llmgw_agent.collectors import Roots
from llmgw_agent.protocol import perftest as wire
from llmgw_agent.stream import Stream

from llmgw import cli
from llmgw.cli.simulate import handlers
from llmgw.inventory.models import Node
from llmgw.simulator.fleet import make_fleet
from tests.tokens import make_token


@pytest.mark.django_db(transaction=True)
def test_the_demo_fleet_answers_the_fabric_test_with_a_graded_simulated_table(
    asgi_server, make_node, agent_client, operator, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("LLMGW_URL", asgi_server)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))
    fleet = {s.name: s for s in make_fleet(12, nvl72_trays=0)}
    stop = threading.Event()
    try:
        for name in ("sim-h100-01", "sim-h100-04"):
            sim = fleet[name]
            assert set(wire.FEATURES) <= set(sim.commands())
            _, credential = make_node(name)
            agent = agent_client(credential)
            assert (
                agent.post("register", msgspec.to_builtins(sim.registration(10))).status_code == 200
            )
            assert agent.post("heartbeat", msgspec.to_builtins(sim.heartbeat())).status_code == 200
            stream = Stream(asgi_server, lambda c=credential: c, Roots(), stop, handlers(sim))
            threading.Thread(target=stream.run_forever, daemon=True).start()
        assert Node.objects.get(name="sim-h100-04").address
        code = cli.main(["ctl", "fabric-test", "sim-h100-01", "sim-h100-04", "--duration", "1"])
    finally:
        stop.set()
    out, err = capsys.readouterr()
    # sim-h100-04's mlx5_3 trained at 2X: the run is not ok, and exits so.
    assert code == 1, err
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RAIL"))
    rows = [line.split() for line in lines[header + 1 : header + 9]]
    assert [r[0] for r in rows] == [str(n) for n in range(8)]
    assert [r[-1] for r in rows] == ["ok"] * 3 + ["degraded"] + ["ok"] * 4, out
    # Graded against the 400 Gb/s its link should run at, not its own 200.
    assert rows[3][3:5] == ["400.0", "Gb/s"]
    assert "rail 3: B's mlx5_3 trained at 200 Gb/s, where the link should run at 400" in out
    assert "not ok: rail 3 (exit status 1)" in out
    assert "simulated: these nodes are simulated and so are their numbers" in out
