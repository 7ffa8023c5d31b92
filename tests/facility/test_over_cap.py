"""A domain past its power cap is marked wherever the facility is shown and
exported for its alert; a finished drain reads as drained, not draining.
PDU r01-pdu1 drew 8.8 kW against its 8.0 kW cap with no mark anywhere."""

from __future__ import annotations

import re
from typing import Any

import pytest

from llmgw.cli import ctl
from llmgw.facility import services
from llmgw.facility.models import Hold
from tests.facility.test_holds_and_budgets import nodes  # noqa: F401
from tests.tokens import make_token

# n1 (rack r01, PDU p1) may draw 1.4 kW (two cards at 700 W limits); n2
# (r01, p2) and n3 (r02) report no power figure.
BUDGETS = [{"domain": "pdu=p1", "watts": 1000.0}, {"domain": "rack=r01", "watts": 5000.0}]


@pytest.mark.django_db
def test_the_listing_says_by_how_much_a_domain_is_over_its_cap(nodes: Any) -> None:  # noqa: F811
    services.set_budgets(BUDGETS)
    rows = {r["domain"]: r for r in services.overview()["domains"]}
    assert (rows["pdu=p1"]["draw_w"], rows["pdu=p1"]["over_cap_w"]) == (1400.0, 400.0)
    assert rows["rack=r01"]["over_cap_w"] is None  # 1.4 kW of 5.0
    # No cap, or no figure: never said to be over.
    assert rows["rack=r02"]["over_cap_w"] is None and rows["rack=r02"]["draw_w"] is None


@pytest.mark.django_db(transaction=True)
def test_ctl_facility_marks_the_domain_over_its_cap_and_a_finished_drain(
    nodes: Any,  # noqa: F811
    live_server: Any,
    operator: Any,
    monkeypatch: Any,
    capsys: Any,
    tmp_path: Any,
) -> None:
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))
    services.set_budgets(BUDGETS)
    assert ctl.main(["facility", "hold", "rack=r02", "--drain", "--reason", "PDU swap"]) == 0
    # What the drain says once nothing runs there any more (serving.draining).
    Hold.objects.filter(domain="rack=r02").update(progress="drained: nothing runs in rack r02")
    capsys.readouterr()
    assert ctl.main(["facility"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if "=" in line.split()[0]}
    assert re.search(r" 1\.4 kW OVER CAP ", rows["pdu=p1"]), out
    assert "OVER CAP" not in rows["rack=r01"], out
    assert (
        "pdu=p1: over its cap: at 1.4 kW of its 1.0 kW cap (0.4 kW over); "
        "nothing that adds to its draw is placed there"
    ) in out, out
    assert "held, drained: PDU swap" in rows["rack=r02"] and "draining" not in rows["rack=r02"]
    assert "rack=r02: drained: nothing runs in rack r02" in out


@pytest.mark.django_db
def test_the_fleet_target_exports_each_domains_draw_by_source_and_its_cap(
    nodes: Any,  # noqa: F811
    api: Any,
) -> None:
    services.set_budgets(BUDGETS)
    text = api.get("/metrics/fleet").content.decode()
    lines = set(text.splitlines())
    p1 = 'domain="pdu=p1",level="pdu"'
    assert f'llmgw_domain_power_watts{{{p1},source="largest"}} 1400.0' in lines, text
    assert f'llmgw_domain_power_watts{{{p1},source="derived"}} 1400.0' in lines
    assert f'llmgw_domain_power_watts{{{p1},source="measured"}} 730.0' in lines
    assert f"llmgw_domain_power_cap_watts{{{p1}}} 1000.0" in lines
    # Unknown is absent, not 0: rack r02's only node reported no figure.
    assert 'llmgw_domain_power_watts{domain="rack=r02"' not in text
    assert 'llmgw_domain_power_unknown_nodes{domain="rack=r02",level="rack"} 1' in lines
