"""Holds, budgets and the facility listing: the service's rules, the API by
role, server.yaml's facility.budgets with an error per line, and
`llmgw ctl facility` against a live server."""

from __future__ import annotations

from typing import Any

import pytest

from llmgw.catalog.loader import CatalogError, parse
from llmgw.cli import ctl
from llmgw.facility import services
from llmgw.facility.models import Budget, Hold
from llmgw.inventory import services as inventory
from llmgw.placement.snapshot import node_views
from tests.payloads import heartbeat, registration
from tests.tokens import make_token


def where(rack: str, pdu: str | None = None, row: str = "w1") -> dict[str, str]:
    labels = {"llmgw.io/room": "m1", "llmgw.io/row": row, "llmgw.io/rack": rack}
    if pdu:
        labels["llmgw.io/pdu"] = pdu
    return labels


GPUS = [
    {"index": i, "uuid": f"GPU-{i}", "class": "H100-80GB", "name": "NVIDIA H100"} for i in range(2)
]


@pytest.fixture
def nodes(make_node: Any, agent_client: Any) -> dict[str, Any]:
    agents = {}
    for name, labels in (
        ("n1", where("r01", "p1")),
        ("n2", where("r01", "p2")),
        ("n3", where("r02")),
    ):
        _, credential = make_node(name)
        agent = agent_client(credential)
        extra = {"gpus": GPUS} if name == "n1" else {}
        assert agent.post("register", registration(name, labels=labels, **extra)).status_code == 200
        agents[name] = agent
    # n1: two cards at 700 W limits drawing 250 + 300 W, and 180 W of CPU packages.
    samples = [
        {"index": 0, "power_draw_w": 250.0, "power_limit_w": 700.0},
        {"index": 1, "power_draw_w": 300.0, "power_limit_w": 700.0},
    ]
    sensors = {"cpu_packages": [{"package": 0, "power_w": 100.0}, {"package": 1, "power_w": 80.0}]}
    agents["n1"].post("heartbeat", heartbeat("n1", gpus=samples, sensors=sensors))
    for name in ("n2", "n3"):
        agents[name].post("heartbeat", heartbeat(name))
    return agents


@pytest.mark.django_db
def test_a_hold_names_a_domain_some_node_is_in_and_says_why(nodes: Any) -> None:
    with pytest.raises(services.FacilityError, match="no node is in rack r99"):
        services.hold("rack=r99", "typo", False, "ops")
    with pytest.raises(services.FacilityError, match="reason: say why"):
        services.hold("rack=r01", "  ", False, "ops")
    with pytest.raises(services.FacilityError, match="'shelf' is not a level"):
        services.hold("shelf=s1", "x", False, "ops")
    assert not Hold.objects.exists()
    services.hold("rack=r01", "PDU swap", True, "ops")
    views = {v.name: v for v in node_views()}
    assert views["n1"].held == "rack r01 (PDU swap, draining)"
    assert views["n3"].held == ""
    services.hold("n3", "disk", False, "ops")
    assert {v.name: v.held for v in node_views()}["n3"] == "node n3 (disk)"
    assert services.release("rack = r01 ") == "rack=r01"
    with pytest.raises(services.FacilityError, match="rack r01 is not held"):
        services.release("rack=r01")


@pytest.mark.django_db
def test_an_operator_label_moves_a_node_to_another_rack(nodes: Any) -> None:
    inventory.set_labels("n3", {"llmgw.io/rack": "r01"}, "ops")
    services.hold("rack=r01", "work", False, "ops")
    assert {v.name for v in node_views() if v.held} == {"n1", "n2", "n3"}


@pytest.mark.django_db
def test_node_views_carry_power_and_budgets(nodes: Any) -> None:
    catalog_text = "facility:\n  budgets:\n    rack=r01: 5000\n    pdu=p1: 2500\n"
    parsed = parse(catalog_text)
    services.set_budgets(parsed.budgets or [])
    views = {v.name: v for v in node_views()}
    n1 = views["n1"]
    assert (n1.derived_w, n1.measured_w, n1.declared_w) == (1400.0, 730.0, None)
    assert [g.power_limit_w for g in n1.gpus] == [700.0, 700.0]
    assert n1.budgets == (("rack=r01", 5000.0), ("pdu=p1", 2500.0))
    # Unknown is unknown: a node that reports no power has no figure at all.
    assert (views["n3"].derived_w, views["n3"].measured_w, views["n3"].budgets) == (None, None, ())
    rows = {r["domain"]: r for r in services.overview()["domains"]}
    assert rows["rack=r01"]["nodes"] == ["n1", "n2"]
    assert rows["rack=r01"]["cap_w"] == 5000.0 and rows["rack=r01"]["draw_w"] == 1400.0
    assert rows["rack=r01"]["unknown_nodes"] == 1
    assert rows["rack=r02"]["draw_w"] is None and rows["rack=r02"]["measured_w"] is None


BAD_BUDGETS = [
    ("facility:\n  budgets:\n    shelf=s1: 100\n", "line 3: facility.budgets.shelf=s1: expected LEVEL=VALUE"),
    ("facility:\n  budgets:\n    rack=r01: 0\n", "line 3: facility.budgets.rack=r01: expected watts above 0"),
    ("facility:\n  budgets:\n    rack=r01: lots\n", "line 3: facility.budgets.rack=r01: expected a number"),
    ("facility:\n  budgets: [1]\n", "line 2: facility.budgets: expected a mapping of domain to watts"),
    ("facility:\n  caps: {}\n", "line 2: facility.caps: unknown key"),
    (
        "facility:\n  budgets:\n    rack=r01: 10\n    rack = r01: 20\n",
        "line 4: facility.budgets.rack = r01: given twice",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("text", "error"), BAD_BUDGETS)
def test_budgets_are_refused_line_by_line(text: str, error: str) -> None:
    with pytest.raises(CatalogError) as caught:
        parse(text)
    assert any(e.startswith(error) for e in caught.value.errors), caught.value.errors


def test_profiles_declare_power_and_keep_within() -> None:
    text = (
        "models:\n  - name: m\n    source: hf://x/m\n    profiles:\n"
        "      - name: p\n        power_w: 5600\n        keep_within: pdu\n"
    )
    with pytest.raises(CatalogError) as caught:
        parse(text)
    assert caught.value.errors == [
        "line 5: models[0].profiles[0].keep_within: expected one of: rack, row, room"
    ]
    parsed = parse(text.replace("pdu", "rack"))
    assert parsed.models[0]["profiles"][0]["power_w"] == 5600


@pytest.mark.django_db
def test_a_file_with_a_bad_budget_applies_nothing(tmp_path: Any) -> None:
    from llmgw.serving import services as serving

    Budget.objects.create(domain="rack=r09", watts=1000)
    path = tmp_path / "server.yaml"
    path.write_text(
        "models:\n  - name: m\n    source: hf://x/m\n    profiles:\n      - name: p\n"
        "        memory_gb: 1\n"
        "facility:\n  budgets:\n    rack=r01: -5\n"
    )
    with pytest.raises(CatalogError):
        serving.apply_catalog(path)
    assert list(Budget.objects.values_list("domain", flat=True)) == ["rack=r09"]
    path.write_text(path.read_text().replace("-5", "12000"))
    assert serving.apply_catalog(path)["budgets"] == 1
    assert list(Budget.objects.values_list("domain", "watts")) == [("rack=r01", 12000.0)]


@pytest.mark.django_db
def test_the_api_lets_operators_hold_and_viewers_read(nodes: Any, api: Any, client: Any) -> None:
    from django.contrib.auth.models import User

    from llmgw.accounts import roles

    viewer = User.objects.create_user("viewer", password="a-long-test-password")
    roles.grant(viewer, roles.VIEWER)
    as_viewer = {"HTTP_AUTHORIZATION": f"Token {make_token(viewer)}"}
    body = {"domain": "pdu=p1", "reason": "breaker test", "drain": True}
    refused = client.post(
        "/api/v1/facility/holds", body, content_type="application/json", **as_viewer
    )
    assert refused.status_code == 403
    made = api.post("/api/v1/facility/holds", body, format="json")
    assert made.status_code == 201 and made.json()["domain"] == "pdu=p1"
    bad = api.post("/api/v1/facility/holds", {"domain": "pdu=", "reason": "x"}, format="json")
    assert bad.status_code == 400 and bad.json()["detail"] == "domain: pdu= needs a value"
    listing = client.get("/api/v1/facility", **as_viewer).json()
    held = {r["domain"]: r["hold"] for r in listing["domains"]}
    assert held["pdu=p1"]["reason"] == "breaker test" and held["rack=r02"] is None
    assert api.delete("/api/v1/facility/holds/pdu=p1").json() == {"released": "pdu=p1"}
    assert api.delete("/api/v1/facility/holds/pdu=p1").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_ctl_facility_lists_holds_and_draw(
    nodes: Any, live_server: Any, operator: Any, monkeypatch: Any, capsys: Any, tmp_path: Any
) -> None:
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))
    services.set_budgets([{"domain": "rack=r01", "watts": 5000.0}])
    assert ctl.main(["facility", "hold", "rack=r01", "--drain", "--reason", "PDU swap"]) == 0
    assert capsys.readouterr().out.strip() == (
        "rack=r01 held: PDU swap; nothing new is placed there, its replicas move out one at a time"
    )
    assert ctl.main(["facility"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("rack=r01 "))
    assert row.split() == [
        "rack=r01", "2:", "n1,n2", "draining:", "PDU", "swap", "5.0", "kW",
        "1.4", "kW", "(+1", "unknown)", "0.7", "kW", "1.4", "kW", "-",
    ]  # fmt: skip
    assert "rack=r01: drain not started yet" in out
    assert ctl.main(["facility", "release", "rack=r01"]) == 0
    assert ctl.main(["facility", "release", "rack=r01"]) == 1
    assert "rack r01 is not held" in capsys.readouterr().err
