"""The cluster page's node table at fleet scale, in Chromium against the
real server: a page of nodes at a time, search, filters by state, GPU
class and rack, and grouping by rack, all answered by the database. The
fleet is written straight into PostgreSQL (tests/bulk_fleet.py): 250
nodes in racks of 20, three pages of 100."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests import bulk_fleet
from tests.console.conftest import PASSWORD, USER, Browser, chromium_beside_django
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

COUNT = 250


@pytest.fixture
def fleet_page(asgi_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    from django.contrib.auth.models import User

    from llmgw.accounts import roles

    roles.grant(User.objects.create_user(USER, password=PASSWORD), roles.VIEWER)
    bulk_fleet.build(COUNT)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with chromium_beside_django() as browser:
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        b = Browser(context.new_page(), asgi_server)
        b.login()
        yield b
        context.close()
    assert b.unexpected() == [], f"errors in the browser console: {b.unexpected()}"


def shown(page: Any) -> list[str]:
    return page.locator("table.nodes tr[data-node]").evaluate_all(
        "rows => rows.map(r => r.dataset.node)"
    )


def settled(page: Any, query: str) -> None:
    """Wait for the reload a filter's change starts, to the link that says it."""
    page.wait_for_url(lambda url: url.endswith("/" + query))


def test_the_table_pages_through_the_fleet(fleet_page):
    b = fleet_page
    page = b.open("/")
    assert shown(page) == [bulk_fleet.name_of(i) for i in range(100)]
    assert page.locator("#shown").inner_text() == "100 of 250 nodes, page 1 of 3"
    silent = bulk_fleet.name_of(7)
    assert page.locator(f'tr[data-node="{silent}"] td.state').inner_text() == "NotReady"
    row = page.locator('tr[data-node="node-00045"]')
    assert row.locator("td.gpus").inner_text() == "8× L40S-48GB"
    assert row.locator("td.location").inner_text() == "fra1/hall1/row00/r002 r002-pdu0"
    assert "250 nodes · 245 Ready · 5 NotReady" in page.locator("h1").inner_text()
    b.shot("cluster-fleet")
    page.click("a[rel=next]")
    settled(page, "?page=2")
    assert shown(page)[0] == "node-00100"
    page.click("a[rel=next]")
    settled(page, "?page=3")
    assert shown(page) == [bulk_fleet.name_of(i) for i in range(200, 250)]
    assert page.locator("a[rel=next]").count() == 0


def test_search_and_filters_ask_the_server(fleet_page):
    b = fleet_page
    page = b.open("/")
    page.fill("input[name=search]", "node-0012")
    settled(page, "?search=node-0012")
    assert shown(page) == [bulk_fleet.name_of(i) for i in range(120, 130)]
    assert page.locator("#shown").inner_text() == "10 of 10 nodes (of 250), page 1 of 1"
    b.shot("cluster-search")
    page.goto(b.url + "/")
    page.select_option("select[name=state]", "NotReady")
    settled(page, "?state=NotReady")
    assert shown(page) == [bulk_fleet.name_of(i) for i in range(COUNT) if bulk_fleet.is_silent(i)]
    page.goto(b.url + "/")
    page.select_option("select[name=class]", "A100-40GB")
    settled(page, "?class=A100-40GB")
    page.select_option("select[name=rack]", "r005")
    settled(page, "?class=A100-40GB&rack=r005")
    assert shown(page) == [bulk_fleet.name_of(i) for i in range(100, 120)]
    # A CPU rack has no A100: nothing matches, and the page says so.
    page.select_option("select[name=rack]", "r003")
    settled(page, "?class=A100-40GB&rack=r003")
    assert shown(page) == []
    assert "No node matches these filters." in page.locator("table.nodes").inner_text()
    page.click("a.clear")
    page.wait_for_url(b.url + "/")
    assert len(shown(page)) == 100


def test_nodes_grouped_by_rack_with_each_racks_counts(fleet_page):
    b = fleet_page
    page = b.open("/")
    page.check("input[name=group]")
    settled(page, "?group=rack")
    groups = page.locator("tbody.rack-group")
    assert groups.count() == 5
    assert groups.nth(0).locator("tr.group").inner_text() == "Rack r000 20 nodes, 19 Ready"
    assert groups.nth(0).locator("tr[data-node]").count() == 20
    b.shot("cluster-racks")
    # A node an operator moved sits under its new rack (in a thread of its
    # own, as a server's: Playwright keeps an event loop on this one).
    from llmgw.inventory import services

    in_own_thread(services.set_labels, "node-00001", {"llmgw.io/rack": "r012"}, "test")
    page.goto(b.url + "/?group=rack&rack=r012")
    assert "node-00001" in shown(page) and len(shown(page)) == 11


def test_a_bad_filter_is_named_on_the_page(fleet_page):
    b = fleet_page
    b.expect_error("400")
    page = b.open("/?state=Bogus")
    assert (
        "state: 'Bogus': one of Ready, NotReady, Cordoned"
        in page.locator("#filter-error").inner_text()
    )
