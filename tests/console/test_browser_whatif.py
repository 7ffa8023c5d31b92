"""The held-model card's what-if in Chromium, against the real server and
the demo-like fleet with two models held: the racks and PDUs whose loss
would leave the model short, as the sweep API says, and one failure
dry-run by clicking it, in the lines the API renders."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HELD = {"qwen2.5-7b-instruct": 3, "llama-3.1-70b-instruct": 2}


def api_json(b, path):
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


@pytest.fixture
def held(site):
    from llmgw.catalog.models import Model
    from llmgw.serving import reconciler
    from llmgw.serving.models import Replica

    for name, count in HELD.items():
        Model.objects.filter(name=name).update(always_running=count, under_load=0)
    reconciler.reconcile_all()
    placed = {name: Replica.objects.filter(model__name=name).count() for name in HELD}
    assert placed == HELD, placed
    return placed


def test_the_card_names_the_domains_whose_loss_would_leave_the_model_short(held, browser):
    b = browser
    model = "llama-3.1-70b-instruct"
    sweep = api_json(b, "/api/v1/whatif/sweep")
    mine = [h for h in sweep["hurt"] if any(x["model"] == model for x in h["below"])]
    page = b.open(f"/held#{model}")
    page.wait_for_selector(f'#card[data-model="{model}"] .whatif .sweep-summary', timeout=30_000)
    summary = page.locator(".whatif .sweep-summary").inner_text()
    if mine:
        assert summary.startswith(f"{len(mine)} of {sweep['tried']} racks and PDUs"), summary
        rows = page.locator("table.sweep tbody tr")
        assert rows.count() == len(mine)
        assert [rows.nth(i).get_attribute("data-domain") for i in range(len(mine))] == [
            h["domain"] for h in mine
        ]
        domain = mine[0]["domain"]
        page.locator(f'table.sweep a.fail-link[data-domain="{domain}"]').click()
    else:
        assert summary.startswith(f"none of {sweep['tried']} racks and PDUs"), summary
        link = page.locator(".whatif p a.fail-link").first
        domain = link.get_attribute("data-domain")
        link.click()
    page.wait_for_selector("pre.whatif-lines")
    answer = api_json(b, f"/api/v1/whatif?fail={domain}")
    assert page.locator("pre.whatif-lines").inner_text() == "\n".join(answer["lines"])
    # A domain nobody is in is refused by name, on the page as in the API.
    page.fill(".whatif-form input[name=domain]", "rack=nowhere")
    b.expect_error("400")
    page.click(".whatif-form button[type=submit]")
    page.wait_for_selector(".whatif-result .refusal")
    assert "unknown domain 'rack=nowhere'" in page.locator(".whatif-result .refusal").inner_text()
    page.fill(".whatif-form input[name=domain]", domain)
    page.click(".whatif-form button[type=submit]")
    page.wait_for_selector("pre.whatif-lines")
    page.locator(".whatif").scroll_into_view_if_needed()
    b.shot("held-whatif")
