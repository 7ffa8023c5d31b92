"""The held page in Chromium against the real server and the demo-like
fleet: each model's ready/target, state and last placement as the API
says them; an explanation grouped by reason, each with its count and the
first nodes, opened to every node; the list again on a pushed change; and
a viewer's page with no control it cannot use."""

from __future__ import annotations

import pytest

from tests.console.conftest import Browser
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HELD = "llama-3.1-70b-instruct"  # placed on the H100 nodes; every GB200 tray refuses it
NOWHERE = "deepseek-r1-671b-cpu"  # no node has 4 TB of memory


def api_json(b, path):
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


@pytest.fixture
def held(site):
    from llmgw.catalog.models import Model
    from llmgw.serving import placing, reconciler

    Model.objects.filter(name=HELD).update(always_running=2, under_load=0)
    reconciler.reconcile_all()
    assert placing.place_replica(NOWHERE)[0] is None  # refused, and recorded


def test_the_list_shows_ready_target_state_and_last_placement(held, browser):
    b = browser
    page = b.open("/held")
    page.wait_for_selector(f'tr[data-model="{HELD}"] td.placed time')
    for m in api_json(b, "/api/v1/models"):
        row = page.locator(f'tr[data-model="{m["name"]}"]')
        h = m["held"]
        assert row.locator("td.ready").inner_text() == f"{h['ready']}/{h['target']}", m["name"]
        assert row.locator("td.held-state").inner_text() == h["state"], m["name"]
    row = page.locator(f'tr[data-model="{HELD}"]')
    assert row.locator("td.held-state").inner_text() in ("starting", "short", "ready")
    assert row.locator("td.ready").inner_text().endswith("/2")
    # "N s ago", the full time with its zone on hover.
    placed = row.locator("td.placed time")
    assert placed.inner_text().endswith(" ago") and placed.get_attribute("title")
    assert "refused" not in row.locator("td.placed").inner_text()
    nowhere = page.locator(f'tr[data-model="{NOWHERE}"]')
    assert nowhere.locator("td.held-state").inner_text() == "not held"
    assert nowhere.locator("td.placed").inner_text().endswith(" ago refused")


def test_the_explanation_is_grouped_and_opens_to_every_node(held, browser):
    b = browser
    page = b.open(f"/held#{HELD}")
    page.wait_for_selector(f'#card[data-model="{HELD}"] .explanation .reason')
    full = api_json(b, f"/api/v1/models/{HELD}/explain")
    [attempt] = full["attempts"]
    biggest = max(attempt["reasons"], key=lambda r: r["count"])
    assert biggest["count"] >= 18  # the 18 GB200 trays at least, once
    item = page.locator(
        f'.attempt[data-profile="{attempt["profile"]}"] .reason[data-code="{biggest["code"]}"]'
    )
    # The line `llmgw ctl explain` prints for the reason, drawn.
    head = item.locator(".reason-head").inner_text()
    first = ", ".join(n["node"] for n in biggest["nodes"][:3])
    line = f"{biggest['count']} nodes: {biggest['summary']} ({biggest['code']}): {first} and {biggest['count'] - 3} more"
    assert head == line
    assert f"  {line}" in full["grouped"]
    assert item.locator(".eg").inner_text() == f"e.g. {biggest['nodes'][0]['message']}"
    assert page.locator(".explanation .reason").count() == len(attempt["reasons"])
    # Not a line a node: one line a reason, until opened.
    assert item.locator("ul.every li").count() == 0
    item.locator("details summary").click()
    page.wait_for_function(
        "n => document.querySelectorAll('.reason details[open] ul.every li[data-node]').length === n",
        arg=biggest["count"],
    )
    listed = item.locator("ul.every li[data-node]").evaluate_all(
        "els => els.map(e => e.dataset.node)"
    )
    assert listed == [n["node"] for n in biggest["nodes"]]
    b.shot("held-model")


def test_the_list_follows_a_pushed_change_of_counts(site, browser):
    from llmgw.serving import services

    b = browser
    page = b.open("/held")
    page.wait_for_selector('tr[data-model="qwen2.5-7b-instruct"] td.ready')
    b.stream_open()
    page.evaluate("window.__same_page = true")
    in_own_thread(services.set_counts, "qwen2.5-7b-instruct", 0, 3)
    page.wait_for_function(
        "document.querySelector('tr[data-model=\"qwen2.5-7b-instruct\"] td.load').textContent === '3'"
    )
    state = page.locator('tr[data-model="qwen2.5-7b-instruct"] td.held-state').inner_text()
    assert state == "idle"
    assert page.evaluate("window.__same_page === true && Number(document.body.dataset.pushes) >= 1")


def test_a_viewer_sees_no_control_it_cannot_use(held, site, chromium, monkeypatch):
    from django.contrib.auth.models import User

    # The test's own ORM calls beside Playwright's loop, as the browser fixture allows.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from llmgw.accounts import roles

    roles.grant(
        User.objects.create_user("watcher", password="a-long-viewer-password"), roles.VIEWER
    )
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    b = Browser(context.new_page(), site)
    b.page.goto(site + "/login/")
    b.page.fill("input[name=username]", "watcher")
    b.page.fill("input[name=password]", "a-long-viewer-password")
    b.page.click("button[type=submit]")
    b.page.wait_for_url(site + "/")
    page = b.open(f"/held#{HELD}")
    page.wait_for_selector(f'#card[data-model="{HELD}"] .explanation .reason')
    assert page.locator("form.counts").count() == 0
    assert page.locator("#card button", has_text="Save").count() == 0
    assert page.locator("#card input[name=always_running]").count() == 0
    assert page.locator(".counts-read").inner_text().startswith("always running 2, under load 0")
    # What a viewer may do stays: the what-if is a dry run.
    assert page.locator(".whatif button", has_text="Dry-run").count() == 1
    # The server refuses the write anyway.
    b.expect_error("403 (Forbidden)")
    status = page.evaluate(
        """m => fetch(`/api/v1/models/${m}`, {method: "PATCH", headers: {"Content-Type":
        "application/json", "X-CSRFToken": (document.cookie.match(/csrftoken=([^;]+)/) || [])[1]},
        body: JSON.stringify({always_running: 3})}).then(r => r.status)""",
        HELD,
    )
    assert status == 403
    context.close()
    assert b.unexpected() == [], b.unexpected()
