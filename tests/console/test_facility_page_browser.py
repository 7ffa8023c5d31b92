"""The facility page in Chromium, against the real server and the demo-like
fleet (racks r01-r03, two PDUs each, power readings; server.example.yaml
caps PDU r01-pdu1 below what its cards may draw) with two models held: the
tree with each domain's draw against its cap and the over-cap PDU marked,
the fleet-wide sweep naming the domains that would leave a model short, a
drain placed and released from the page, a hold placed elsewhere arriving
without a reload, and a viewer's page with no control it cannot use."""

from __future__ import annotations

from typing import Any

import pytest

from tests.console.conftest import ARTIFACTS
from tests.console.fleet import ROOT
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXAMPLE = ROOT / "deploy" / "server.example.yaml"
HELD = {"qwen2.5-7b-instruct": 3, "llama-3.1-70b-instruct": 2}


def api_json(b: Any, path: str) -> Any:
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


@pytest.fixture
def held(site: str) -> None:
    from llmgw.catalog.loader import parse
    from llmgw.catalog.models import Model
    from llmgw.facility import services
    from llmgw.serving import reconciler
    from llmgw.serving.models import Replica

    # The example's caps, as `llmgw catalog apply` sets them.
    services.set_budgets(parse(EXAMPLE.read_text()).budgets or [])
    for name, count in HELD.items():
        Model.objects.filter(name=name).update(always_running=count, under_load=0)
    reconciler.reconcile_all()
    placed = {name: Replica.objects.filter(model__name=name).count() for name in HELD}
    assert placed == HELD, placed


def row(page: Any, domain: str) -> Any:
    return page.locator(f'#tree tr[data-domain="{domain}"]')


def kw(watts: float) -> str:
    return f"{watts / 1000:.1f} kW"


def test_the_tree_the_sweep_and_a_drain_from_the_page(held: None, browser: Any) -> None:
    from llmgw.facility import services
    from llmgw.serving import reconciler
    from llmgw.serving.models import Shard

    b = browser
    page = b.open("/facility")
    page.wait_for_selector('#tree tr[data-domain="pdu=r01-pdu1"]')
    listing = {d["domain"]: d for d in api_json(b, "/api/v1/facility")["domains"]}

    # Power against the cap, and the PDU past it marked with by how much.
    over = listing["pdu=r01-pdu1"]
    assert over["over_cap_w"] and over["parent"] == "rack=r01"
    pdu = row(page, "pdu=r01-pdu1")
    assert "over-cap" in (pdu.get_attribute("class") or "")
    text = pdu.inner_text()
    assert "OVER CAP" in text and f"{kw(over['draw_w'])} of {kw(over['cap_w'])}" in text
    assert f"over by {kw(over['over_cap_w'])}" in text
    hall = listing["room=hall1"]
    assert f"{kw(hall['draw_w'])} of {kw(hall['cap_w'])}" in row(page, "room=hall1").inner_text()
    assert "OVER CAP" not in row(page, "room=hall1").inner_text()
    # Where the figure comes from, node by node.
    source = pdu.locator("td.source").inner_text()
    assert any(word in source for word in ("measured on", "card limits on", "profile estimate on"))
    # A rack's nodes, listed on demand.
    rack = row(page, "rack=r01")
    rack.locator("button.nodes-toggle").click()
    names = page.locator('tr[data-nodes-of="rack=r01"] a').all_inner_texts()
    assert names == listing["rack=r01"]["nodes"]

    # The sweep: which domains would leave which held models short.
    sweep = api_json(b, "/api/v1/whatif/sweep")
    assert sweep["hurt"], "the demo fleet's held models should have a domain they cannot lose"
    page.click("#sweep-run")
    page.wait_for_selector("#sweep .sweep-summary", timeout=60_000)
    summary = page.locator("#sweep .sweep-summary").inner_text()
    assert summary.startswith(f"{len(sweep['hurt'])} of {sweep['tried']} domains (rack, pdu)")
    hurt_rows = page.locator("table.sweep-hurt tbody tr")
    assert [hurt_rows.nth(i).get_attribute("data-domain") for i in range(hurt_rows.count())] == [
        h["domain"] for h in sweep["hurt"]
    ]
    first = sweep["hurt"][0]
    expect = ", ".join(
        f"{x['model']} {x['replicas']}/{x['always_running']}" for x in first["below"]
    )
    hurt_rows.first.locator("a.show-domain").click()
    assert row(page, first["domain"]).locator("td.if-failed").inner_text() == expect

    # A drain placed from the page: its progress shows as the reconciler moves out.
    target = Shard.objects.filter(replica__model__name="qwen2.5-7b-instruct").first()
    rack_key = f"rack={target.node.labels['llmgw.io/rack']}"
    b.stream_open()
    pushes = int(page.evaluate("Number(document.body.dataset.pushes || 0)"))
    hold_row = row(page, rack_key)
    hold_row.locator("button.hold-open").click()
    hold_row.locator("input[name=reason]").fill("PDU swap")
    hold_row.locator("input[name=drain]").check()
    hold_row.locator("form.hold-form button[type=submit]").click()
    page.wait_for_selector(f"#note:text('{rack_key} held, draining')")
    assert "draining: PDU swap" in row(page, rack_key).locator("td.hold").inner_text()
    in_own_thread(reconciler.reconcile_all)
    progress = row(page, rack_key).locator("td.hold .progress")
    page.wait_for_function(
        "([sel]) => (document.querySelector(sel) || {}).textContent?.includes('moving')",
        arg=[f'#tree tr[data-domain="{rack_key}"] td.hold .progress'],
        timeout=20_000,
    )
    assert f"out of rack {rack_key.split('=')[1]}" in progress.inner_text()
    # The sweep's answer predates the drain: said so, kept.
    assert "the fleet has changed since" in page.locator("#sweep").inner_text()

    # A hold placed elsewhere (the API, another operator) arrives unasked.
    in_own_thread(services.hold, "pdu=r03-pdu0", "breaker test", False, "someone")
    page.wait_for_selector('#tree tr[data-domain="pdu=r03-pdu0"] td.hold.held', timeout=10_000)
    assert int(page.evaluate("Number(document.body.dataset.pushes || 0)")) > pushes
    assert "held: breaker test" in row(page, "pdu=r03-pdu0").inner_text()
    page.locator("#sweep").scroll_into_view_if_needed()
    b.shot("facility-page")

    row(page, rack_key).locator("button.release").click()
    page.wait_for_selector(f"#note:text('{rack_key} released')")
    assert row(page, rack_key).locator("td.hold").inner_text() == "-"
    held_now = {d["domain"] for d in api_json(b, "/api/v1/facility")["domains"] if d["hold"]}
    assert held_now == {"pdu=r03-pdu0"}


def test_a_viewer_sees_the_facility_and_the_sweep_but_no_control(
    site: str, chromium: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.auth.models import User

    from llmgw.accounts import roles
    from llmgw.facility import services

    # Plain ORM calls beside Playwright's event loop, as the browser fixture's.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    roles.grant(
        User.objects.create_user("watcher", password="a-long-viewer-password"), roles.VIEWER
    )
    in_own_thread(services.hold, "rack=r02", "cooling", True, "ops")
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(site + "/login/")
    page.fill("input[name=username]", "watcher")
    page.fill("input[name=password]", "a-long-viewer-password")
    page.click("button[type=submit]")
    page.wait_for_url(site + "/")
    page.goto(site + "/facility")
    page.wait_for_selector('#tree tr[data-domain="rack=r02"] td.hold.held')
    assert "cooling" in page.locator('#tree tr[data-domain="rack=r02"]').inner_text()
    assert page.locator("#tree button.hold-open, #tree button.release, #tree form").count() == 0
    assert page.locator("#tree td.actions, #tree thead th").count() == 6
    assert page.locator("#sweep-run").is_enabled()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "facility-page-viewer.png"), full_page=True)
    context.close()
    assert errors == []
