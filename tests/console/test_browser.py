"""The console in Chromium against the real server and the demo-like fleet:
what the API says is what each page shows, and pushed changes arrive
without a reload. Console errors fail the test (see conftest)."""

from __future__ import annotations

import pytest

from tests.console import fleet
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def api_json(b, path):
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


def gib(n):
    # The pages print sizes as the CLI does: one rule for every surface.
    from llmgw.units import format_bytes

    return format_bytes(n)


def test_cluster_page_matches_the_api(browser):
    b = browser
    page = b.open("/")
    node = api_json(b, "/api/v1/nodes/sim-h100-01")
    row = page.locator('tr[data-node="sim-h100-01"]')
    assert row.locator("td.mem").inner_text() == gib(node["memory_total_bytes"])
    h100 = [
        g
        for n in api_json(b, "/api/v1/nodes?limit=1000")["results"]
        for g in n["gpus"]
        if g["gpu_class"] == "H100-80GB"
    ]
    assert page.locator('tr[data-class="H100-80GB"] td').nth(1).inner_text() == str(len(h100))
    assert fleet.SM_STANDBY in page.locator("table.sms").inner_text()
    assert "1 degraded" in page.locator("table.fabrics").inner_text()
    b.shot("cluster")


def test_node_page_refreshes_in_place_on_a_pushed_change(browser):
    b = browser
    name, device = fleet.DOWN
    page = b.open(f"/nodes/{name}")
    page.wait_for_selector("#node[data-loaded]")
    node = api_json(b, f"/api/v1/nodes/{name}")
    assert (
        page.locator("#ram-detail").inner_text().endswith(f"of {gib(node['memory_total_bytes'])}")
    )
    assert (
        page.locator(f'#ports tr[data-port="{device}/1"] td').nth(2).inner_text()
        == "DOWN / Polling"
    )
    assert "symbol_error 3" in page.locator('#ports tr[data-port="mlx5_2/1"]').inner_text()
    assert page.locator("table.matrix td.nv").count() == 8 * 7
    assert "Prometheus is not configured" in page.locator("#charts").inner_text()
    b.shot("node")
    b.stream_open()
    page.evaluate("window.__same_page = true")
    in_own_thread(
        fleet.send_ports, name, 3, set()
    )  # the cable is back: a durable change, sent on commit
    page.wait_for_function(
        f"document.querySelector('#ports tr[data-port=\"{device}/1\"] td:nth-child(3)').textContent.startsWith('ACTIVE')"
    )
    assert page.evaluate("window.__same_page === true && Number(document.body.dataset.pushes) >= 1")


def test_held_model_card_shows_a_refusal_with_its_reason(browser, api):
    b = browser
    model = "deepseek-r1-671b-cpu"
    page = b.open(f"/held#{model}")
    page.wait_for_selector(f'#card[data-model="{model}"] form.counts')
    headroom = api_json(b, f"/api/v1/models/{model}")["headroom"]
    assert page.locator('.headroom li[data-profile="cpu"] b').inner_text() == str(headroom["cpu"])
    expected = api.patch(f"/api/v1/models/{model}", {"always_running": 1}, format="json")
    assert expected.status_code == 409
    b.expect_error("409 (Conflict)")  # the refusal itself, logged by Chromium as a failed load
    page.fill("input[name=always_running]", "1")
    page.click("form.counts button")
    refusal = page.wait_for_selector(".refusal")
    assert expected.json()["detail"] in refusal.inner_text()
    # min_memory_gb: 4000 is 4000 GiB, printed as every surface prints it.
    assert "needs 3.91 TiB" in page.locator(".result").inner_text()
    b.shot("held")


def test_gpu_map_shows_every_card(browser):
    b = browser
    page = b.open("/gpus")
    page.wait_for_selector("#map[data-loaded]")
    cards = sum(len(n["gpus"]) for n in api_json(b, "/api/v1/nodes?limit=1000")["results"])
    assert page.locator("a.gpu").count() == cards
    assert page.locator('[data-node="sim-gb200-t07"] a.gpu.nvl-out').count() == 1
    b.shot("gpus")


def test_nvlink_racks_say_why_a_tray_is_out(browser):
    b = browser
    page = b.open("/admin/nvlink")
    page.wait_for_selector("#racks[data-loaded]")
    [domain] = api_json(b, "/api/v1/nvlink")["domains"]
    [out] = [t for t in domain["trays"] if not t["joined"]]
    assert page.locator(f'g.tray.out[data-node="{out["node"]}"]').count() == 1
    assert page.locator("g.tray.joined").count() == domain["joined_trays"]
    assert page.locator(
        f'.held-out li[data-node="{out["node"]}"] .reason'
    ).inner_text() == "; ".join(out["held_out_because"])
    assert page.locator("rect.chip.out").count() == 1
    b.shot("nvlink")


def test_fabric_map_draws_zooms_finds_and_goes_live(browser):
    b = browser
    page = b.open("/admin/fabrics")
    page.wait_for_selector("#stage[data-drawn='1']")
    [fabric] = [f for f in api_json(b, "/api/v1/fabrics")["fabrics"] if f["map"]]
    topo = api_json(b, f"/api/v1/fabrics/{fabric['id']}/topology")["map"]
    [bad] = topo["degraded_links"]
    assert page.locator(f'path.degraded-link[data-a="{bad["a"]["guid"]}"]').count() == 1
    assert page.locator("g.switch").count() == len(topo["switches"])
    name, _ = fleet.DOWN
    assert page.locator(f'circle.port.down[data-node="{name}"]').count() == 1
    assert page.locator("circle.port.up").count() == 8 * len(fleet.OURS) - 1
    # One reading of the counters so far: traffic unknown, so nothing runs yet.
    assert page.locator("circle.particle").count() == 0

    leaf = topo["switches"][0]
    page.locator(f'g.switch[data-guid="{leaf["guid"]}"]').click()
    assert leaf["description"] in page.locator("#panel").inner_text()
    before = page.evaluate("window.fabricMap.transform.k")
    page.mouse.move(700, 500)
    page.mouse.wheel(0, -600)
    page.wait_for_function(f"window.fabricMap.transform.k > {before}")

    page.fill("#find-node", fleet.SHORT[0])
    page.click("#find button")
    page.wait_for_selector(f"#panel:not([hidden]) >> text={fleet.SHORT[0]}")
    page.wait_for_timeout(600)  # the zoom's transition, for the picture only
    b.shot("fabric-found")

    b.stream_open()
    page.evaluate("window.__same_page = true")
    in_own_thread(fleet.send_ports, name, 3, set())
    page.wait_for_function("document.querySelectorAll('circle.port.down').length === 0")
    assert page.evaluate("window.__same_page === true && Number(document.body.dataset.pushes) >= 1")
    # The second reading gives each port its bytes per second: particles run.
    assert page.locator("circle.particle").count() > 0
    page.click("#panel .close")
    page.click("#fit")
    page.wait_for_timeout(600)  # the fit's transition, for the picture only
    b.shot("fabric")
