"""`llmgw ctl whatif` on the demo fleet, through a real server: the
simulated nodes (racks, PDUs, power readings) join through the agent API,
the example catalog is applied whole (budgets included), two models are
held, and the sweep names the racks and PDUs whose loss would hurt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from llmgw.catalog.models import Model
from llmgw.cli import ctl
from llmgw.serving import reconciler
from llmgw.serving import services as serving
from llmgw.simulator.fleet import make_fleet
from tests.tokens import make_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "server.example.yaml"
HELD = {"qwen2.5-7b-instruct": 3, "llama-3.1-70b-instruct": 2}


@pytest.fixture
def demo(asgi_server: str, make_node: Any, agent_client: Any, operator: Any, monkeypatch) -> str:
    sims = make_fleet(12, nvl72_trays=0)
    agents = {}
    for sim in sims:
        _, credential = make_node(sim.name)
        agents[sim.name] = agent_client(credential)
        assert agents[sim.name].post("register", msgspec.to_builtins(sim.registration(10)))
    serving.apply_catalog(EXAMPLE)
    for sim in sims:  # the engines the catalog names are installed now
        for _ in range(2):
            r = agents[sim.name].post("heartbeat", msgspec.to_builtins(sim.heartbeat()))
            assert r.status_code == 200, r.content
            sim.desired = r.json().get("desired")
    for name, count in HELD.items():
        Model.objects.filter(name=name).update(always_running=count, under_load=0)
    reconciler.reconcile_all()
    monkeypatch.setenv("LLMGW_URL", asgi_server)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    return asgi_server


def run(capsys: Any, *argv: str) -> list[str]:
    assert ctl.main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()


def test_sweep_names_the_domains_that_would_hurt(demo, capsys):
    import json

    lines = run(capsys, "whatif", "sweep")
    data = json.loads("\n".join(run(capsys, "whatif", "sweep", "--json")))
    assert lines == data["lines"]
    # Twelve nodes over three racks and their PDUs; llama-3.1-70b takes a whole
    # H100 node per replica and the fleet has few: some rack or PDU hurts it.
    assert data["tried"] >= 6 and data["hurt"], lines
    named = [line.split(":")[0].strip() for line in lines[1:]]
    assert named == [h["domain"] for h in data["hurt"]]
    assert all("=" in d and d.split("=")[0] in ("rack", "pdu") for d in named)
    # Each one, failed alone, says the same of itself.
    first = data["hurt"][0]
    fail = run(capsys, "whatif", "fail", first["domain"])
    assert fail[0].startswith(f"if {first['domain']} failed (")
    for b in first["below"]:
        wanted = f"  {b['model']} would be left with {b['replicas']} of {b['always_running']}"
        assert any(line.startswith(wanted) for line in fail), fail
    # The example catalog caps PDUs: the power afterwards is part of the answer.
    assert "  power afterwards, per capped domain:" in fail


def test_an_unknown_domain_is_refused_by_name(demo, capsys):
    assert ctl.main(["whatif", "fail", "rack=r99"]) == 1
    err = capsys.readouterr().err
    assert "unknown domain 'rack=r99': no node is labelled llmgw.io/rack=r99" in err
