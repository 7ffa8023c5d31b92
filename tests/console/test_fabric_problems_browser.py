"""The fabric page lists the map's cabling problems in the words
``llmgw fabric analyze`` prints them. Console errors fail the test (see conftest)."""

from __future__ import annotations

import pytest

from tests.console.test_browser import api_json
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _store_miscabled() -> None:
    from django.utils import timezone

    from llmgw.fabrics import ibnetdiscover, sweep, topology
    from llmgw.fabrics.models import FabricMap
    from tests.fabrics.data import IBSIM

    text = (IBSIM / "miscabled-ibnetdiscover.txt").read_text()
    fabric = FabricMap.objects.select_related("fabric").get().fabric
    sweep.store_map(fabric, topology.analyze(ibnetdiscover.parse(text)), timezone.now(), "x")


def test_fabric_page_lists_cabling_problems(browser):
    b = browser
    page = b.open("/admin/fabrics")
    page.wait_for_selector("#stage[data-drawn='1']")
    # The fleet's map is a healthy tree: nothing to list.
    assert page.locator("#fabric-problems").is_hidden()

    in_own_thread(_store_miscabled)
    [fabric] = [f for f in api_json(b, "/api/v1/fabrics")["fabrics"] if f["map"]]
    assert fabric["map"]["summary"]["problems"] == 2
    page = b.open(f"/admin/fabrics?fabric={fabric['id']}")
    page.wait_for_selector("#fabric-problems:not([hidden])")
    items = page.locator("#fabric-problems li")
    assert items.all_inner_texts() == [
        "leaf-to-leaf: leaf00 port 13 - leaf03 port 13",
        "port-down: leaf02 port 9 - spine02 port 5",
    ]
    assert "2 cabling problems" in page.locator("#fabric-summary").inner_text()
    page.wait_for_selector("#stage[data-drawn='1']")
    b.shot("fabric-problems")
