"""The node page's Facility card in Chromium, against the real server and
the demo-like fleet: the node's place in the facility tree, set from the
page, and a hold placed on its rack and released from the page."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def api_json(b, path):
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


def test_the_node_page_sets_location_and_holds_its_rack(browser):
    b = browser
    name = api_json(b, "/api/v1/nodes/?limit=1")["results"][0]["name"]
    page = b.open(f"/nodes/{name}")
    page.wait_for_selector("#facility table.facility-domains")
    form = page.locator("form.facility-location")
    form.locator("input[name=room]").fill("hall9")
    form.locator("input[name=rack]").fill("r42")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("#facility .facility-note:text('location saved')")
    labels = api_json(b, f"/api/v1/nodes/{name}/")["labels"]
    assert labels["llmgw.io/rack"] == "r42" and labels["llmgw.io/room"] == "hall9"
    assert "hall9" in page.locator("#facility .facility-where").inner_text()

    row = page.locator("#facility tr", has_text="rack=r42")
    row.locator("input[placeholder=reason]").fill("PDU swap")
    row.locator("input[type=checkbox]").check()
    row.locator("button", has_text="Hold").click()
    page.wait_for_selector("#facility td.held")
    assert "draining: PDU swap" in row.locator("td.held").inner_text()
    holds = {d["domain"]: d["hold"] for d in api_json(b, "/api/v1/facility")["domains"]}
    assert holds["rack=r42"]["reason"] == "PDU swap" and holds["rack=r42"]["drain"] is True
    page.locator("#facility").scroll_into_view_if_needed()
    b.shot("node-facility")

    row.locator("button", has_text="Release").click()
    page.wait_for_selector("#facility .facility-note:text('rack=r42 released')")
    holds = {d["domain"]: d["hold"] for d in api_json(b, "/api/v1/facility")["domains"]}
    assert holds["rack=r42"] is None
