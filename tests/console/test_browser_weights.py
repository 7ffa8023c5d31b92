"""The held-model page in Chromium, against the real server and the
demo-like fleet: each fabric's nodes holding the weights, as the API says."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def api_json(b, path):
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


def test_held_model_card_shows_the_weights_per_fabric(browser):
    b = browser
    models = api_json(b, "/api/v1/models")
    # A model some simulated node holds, so the card has holders to show.
    model = next(m for m in models if any(g["holders"] for g in m["weights_by_fabric"]))
    groups = model["weights_by_fabric"]
    page = b.open(f"/held#{model['name']}")
    page.wait_for_selector(f'#card[data-model="{model["name"]}"] table.weights')
    rows = page.locator("table.weights tbody tr")
    assert rows.count() == len(groups)
    for i, g in enumerate(groups):
        cells = rows.nth(i).locator("td")
        assert cells.nth(0).inner_text() == g["label"]
        held = (
            f"{len(g['holders'])}/{g['nodes']} nodes" if g["holders"] else f"none of {g['nodes']}"
        )
        assert cells.nth(1).inner_text() == held
        assert cells.nth(2).inner_text() == (", ".join(g["holders"]) or "-")
    # The simulated fleet has fabrics and CPU servers on none.
    labels = [g["label"] for g in groups]
    assert any(g["fabric"] for g in groups), labels
    assert labels[-1] == "no fabric known", labels
    page.locator("table.weights").scroll_into_view_if_needed()
    b.shot("held-weights")
