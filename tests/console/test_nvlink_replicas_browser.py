"""The NVLink page in Chromium: each tray marked with the replicas it
carries, and pointing at a replica lights its other trays. Console errors
fail the test (see conftest)."""

from __future__ import annotations

import pytest

from tests.console.test_browser import api_json
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL = "deepseek-v3-671b"  # four GB200 trays a replica (deploy/server.example.yaml)


def _place() -> int:
    from llmgw.serving import placing

    replica, result = placing.place_replica(MODEL)
    assert replica is not None, result.explanation.render()
    return int(replica.pk)


def test_trays_name_their_replicas_and_light_each_others(browser):
    b = browser
    first, second = in_own_thread(_place), in_own_thread(_place)
    [domain] = api_json(b, "/api/v1/nvlink")["domains"]
    spans = {
        r: [t["node"] for t in domain["trays"] if r in [x["id"] for x in t["replicas"]]]
        for r in (first, second)
    }
    assert len(spans[first]) == 4 and len(spans[second]) == 4
    assert not set(spans[first]) & set(spans[second])

    page = b.open("/admin/nvlink")
    page.wait_for_selector("#racks[data-loaded]")
    tray = page.locator(f'g.tray[data-node="{spans[first][0]}"]')
    assert tray.locator(f'g.rep[data-replica="{first}"] text').text_content() == f"{MODEL} #{first}"
    # Each of its cards is marked as the replica's, under the chip.
    assert tray.locator(f'rect.chip-owner[data-replica="{first}"]').count() == 4
    listed = page.locator(f'ul.rack-replicas li[data-replica="{first}"]').inner_text()
    assert f"{MODEL} #{first}" in listed and ", ".join(spans[first]) in listed

    tray.locator(".tray-body").hover(position={"x": 112, "y": 15})  # beside its name
    lit = page.locator("g.tray.hl")
    lit.first.wait_for()
    assert sorted(t.get_attribute("data-node") for t in lit.all()) == sorted(spans[first])
    assert page.locator("g.tray.dim").count() == len(domain["trays"]) - 4
    page.locator("section.rack-card h2").hover()
    page.mouse.move(5, 5)
    page.wait_for_function("!document.querySelector('g.tray.hl, g.tray.dim')")

    # The second replica's line in the list lights its trays too.
    page.locator(f'ul.rack-replicas li[data-replica="{second}"]').hover()
    page.wait_for_selector(f'g.tray.hl[data-node="{spans[second][0]}"]')
    assert sorted(t.get_attribute("data-node") for t in page.locator("g.tray.hl").all()) == sorted(
        spans[second]
    )
    # A redraw (another replica placed redraws the racks) keeps what the
    # pointer rests on lit, with no move of the pointer to light it again.
    drawn = page.locator("#racks").get_attribute("data-loaded")
    in_own_thread(_place)
    page.wait_for_function(f"document.querySelector('#racks').dataset.loaded !== '{drawn}'")
    assert sorted(t.get_attribute("data-node") for t in page.locator("g.tray.hl").all()) == sorted(
        spans[second]
    )
    assert page.locator("g.tray.dim").count() == len(domain["trays"]) - 4
    b.shot("nvlink-rack")
