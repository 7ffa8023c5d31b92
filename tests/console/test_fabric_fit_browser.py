"""The fabric map for the operator on call, in Chromium: at Fit the fabric
fills the view, a switch says its name and ports when pointed at, and the
findings beside the drawing (a degraded cable, an adapter off its rail, a
port of ours down) each zoom to their place when clicked. Console errors
fail the test (see conftest)."""

from __future__ import annotations

import pytest

from tests.console import fleet
from tests.console.test_browser import api_json
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

OFF_RAIL = ("node00006", "mlx5_2")  # cabled into rail 5's leaf of its group

# The bounding box of what the canvas drew, as shares of the canvas.
DRAWN_BOX = """() => {
  const c = document.getElementById("canvas"), w = c.width, h = c.height;
  const d = c.getContext("2d").getImageData(0, 0, w, h).data;
  let x0 = w, y0 = h, x1 = -1, y1 = -1;
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) if (d[(y * w + x) * 4 + 3] > 0) {
    if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y;
  }
  return { width: (x1 - x0) / w, height: (y1 - y0) / h };
}"""

# Where an adapter is drawn, in the stage's pixels, and the stage's size.
ON_SCREEN = """([node, device]) => {
  const a = window.fabricMap.layout.adapters.find((x) => x.node === node && x.device === device);
  const [x, y] = window.fabricMap.transform.apply([a.x, a.y]), r = document.getElementById("stage").getBoundingClientRect();
  return { x, y, width: r.width, height: r.height, k: window.fabricMap.transform.k };
}"""


def _store_off_rail() -> None:
    """The fleet's map again, one adapter cabled to another rail's leaf."""
    from django.utils import timezone

    from llmgw.fabrics import ibnetdiscover, sweep, topology
    from llmgw.fabrics.models import FabricMap
    from llmgw.simulator.fat_tree import FatTree, Host
    from llmgw.simulator.ibnetdiscover_dump import dump

    names = fleet.OURS + [f"node{n:05d}" for n in range(len(fleet.OURS), 16)]
    hosts = tuple(Host(name, 8, 0xE09D730300000000 + n * 0x100) for n, name in enumerate(names))
    tree = FatTree(
        "ib-a",
        hosts,
        hosts_per_leaf=8,
        spines=4,
        switch_ports=16,
        short={("adapter", *fleet.SHORT): "4xHDR"},
        miswired={OFF_RAIL: 5},
    )
    fabric = FabricMap.objects.select_related("fabric").get().fabric
    analysis = topology.analyze(ibnetdiscover.parse(dump(tree)))
    sweep.store_map(fabric, analysis, timezone.now(), fleet.OURS[0])


def test_fit_fills_the_view_and_findings_zoom_to_their_place(browser):
    b = browser
    in_own_thread(_store_off_rail)
    [fabric] = [f for f in api_json(b, "/api/v1/fabrics")["fabrics"] if f["map"]]
    topo = api_json(b, f"/api/v1/fabrics/{fabric['id']}/topology")["map"]
    assert topo["summary"]["misaligned_rails"] == 1
    page = b.open(f"/admin/fabrics?fabric={fabric['id']}")
    page.wait_for_selector("#stage[data-drawn='1']")
    page.wait_for_selector("#findings section[data-kind=down]:not([hidden])")

    # At Fit the drawing fills the view both ways, and no switch is cut off.
    drawn = page.evaluate(DRAWN_BOX)
    assert drawn["width"] > 0.8 and drawn["height"] > 0.75, drawn
    stage = page.locator("#stage").bounding_box()
    for box in [s.bounding_box() for s in page.locator("g.switch").all()]:
        assert stage["x"] <= box["x"] and box["x"] + box["width"] <= stage["x"] + stage["width"]
        assert stage["y"] <= box["y"] and box["y"] + box["height"] <= stage["y"] + stage["height"]
    # A leaf's label reads at this zoom: its name, less what all switches share.
    leaf = next(s for s in topo["switches"] if s["tier"] == "leaf")
    label = page.locator(f'g.switch[data-guid="{leaf["guid"]}"] text')
    assert label.text_content() == leaf["description"].removeprefix("ib-a-")
    assert label.bounding_box()["height"] >= 10
    b.shot("fabric-fit")

    # Pointed at, a switch says its whole name, GUID and ports.
    spine = next(s for s in topo["switches"] if s["tier"] == "spine")
    page.hover(f'g.switch[data-guid="{spine["guid"]}"]')
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert spine["description"] in text and spine["guid"] in text
    assert f"ports: {spine['connected_ports']} of {spine['ports']} connected" in text
    b.shot("fabric-switch-tip")
    page.mouse.move(5, 5)
    tip.wait_for(state="hidden")

    # The findings, each once: the short cable, the adapter off its rail, our port down.
    findings = page.locator("#findings")
    [deg] = findings.locator("li[data-kind=degraded]").all_inner_texts()
    assert deg.startswith(" ".join(fleet.SHORT)) and "4xHDR where 4xNDR is expected" in deg
    [off] = findings.locator("li[data-kind=off-rail]").all_inner_texts()
    assert off.startswith(" ".join(OFF_RAIL))
    [down] = findings.locator("li[data-kind=down]").all_inner_texts()
    assert down == f"{' '.join(fleet.DOWN)}: DOWN / Polling"

    at_fit = page.evaluate(ON_SCREEN, list(OFF_RAIL))
    findings.locator("li[data-kind=off-rail]").click()
    page.wait_for_function(f"window.fabricMap.transform.k > {at_fit['k'] * 1.5}")
    page.wait_for_timeout(700)  # the zoom's transition
    at = page.evaluate(ON_SCREEN, list(OFF_RAIL))
    # Zoomed in on the adapter, which sits in the part the panel leaves clear.
    assert 0 < at["x"] < at["width"] - 330 and 0 < at["y"] < at["height"]
    assert page.locator("#findings li.on[data-kind=off-rail]").count() == 1
    assert page.locator("circle.finding-mark.off-rail").count() == 1
    assert page.locator("text.finding-label").text_content() == " ".join(OFF_RAIL)
    assert "belongs on" in page.locator("#panel").inner_text()
    b.shot("fabric-finding")

    findings.locator("li[data-kind=down]").click()
    page.wait_for_timeout(700)
    at = page.evaluate(ON_SCREEN, list(fleet.DOWN))
    assert (
        0 < at["x"] < at["width"] - 330
        and 0 < at["y"] < at["height"]
        and at["k"] > at_fit["k"] * 1.5
    )
    assert page.locator("circle.finding-mark.down").count() == 1
    assert page.locator("#findings li.on").count() == 1


def test_a_viewer_reads_the_fabric_and_nvlink_pages_with_nothing_to_refuse(
    site, chromium, monkeypatch
):
    """Both pages only read: a viewer gets the whole of them, every control
    on them is one a viewer may use, and no call they make is refused."""
    from django.contrib.auth.models import User

    from llmgw.accounts import roles
    from tests.console.conftest import Browser

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
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

    page = b.open("/admin/fabrics")
    page.wait_for_selector("#stage[data-drawn='1']")
    page.wait_for_selector("#findings li[data-kind=down]")
    page.locator("#findings li[data-kind=down]").click()
    page.wait_for_selector("#panel:not([hidden])")
    buttons = {t.strip() for t in page.locator("main button:visible").all_inner_texts()}
    assert buttons == {"Find", "Fit", "×"}, buttons

    page = b.open("/admin/nvlink")
    page.wait_for_selector("#racks[data-loaded]")
    assert page.locator("main button, main form").count() == 0
    context.close()
    assert b.unexpected() == [], b.unexpected()
