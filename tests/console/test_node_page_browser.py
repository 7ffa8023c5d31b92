"""The node page for the operator on call, in Chromium against the real
server and the demo-like fleet: the replicas running on the node with
what its agent measured them using, the cordon and its reason in words,
cordon, uncordon and labels set from the page, and charts whose axes say
their unit and whose times say their day and zone."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.console.conftest import ARTIFACTS, PASSWORD
from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL = "qwen2.5-7b-instruct"  # its gpu profile: one H100 card, 16 GiB, 4 cores
GiB = 2**30
# "3 min ago" on the page; its title the full time with the year and a zone.
FULL_TIME = re.compile(r"2\d{3}.*\d{1,2}:\d{2}:\d{2}.*(UTC|GMT|[A-Z]{3,4}|[+-]\d)")


def api_json(b, path):
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


def place(model: str) -> tuple[int, str]:
    from llmgw.serving import services

    replica, placement, _ = services.place_by_hand(model)
    assert replica is not None, placement
    return replica.pk, replica.shards.get().node.name


def report_shard(node: str, replica: int, cores: float | None, memory: int | None) -> None:
    """One heartbeat's shards section, through the inventory service (the
    path a real heartbeat takes once the agent API has checked it)."""
    from llmgw.inventory import heartbeats
    from llmgw.inventory.models import Node

    row = Node.objects.get(name=node)
    shard = {
        "id": f"r{replica}-0",
        "replica": replica,
        "state": "ready",
        "url": f"http://{row.address}:18123",
        "cpu_cores": cores,
        "memory_bytes": memory,
    }
    # The engine it was told to install, installed, as its agent says so.
    engine = {"name": "llama.cpp", "version": "b4000", "status": "installed", "message": ""}
    data = {"schema": 1, "node": node, "shards": [shard], "engines": [engine]}
    heartbeats.heartbeat(row, {**data, "engines_probed": True})


def test_the_node_page_lists_its_replicas_with_their_measured_use(browser):
    b = browser
    replica, name = in_own_thread(place, MODEL)
    in_own_thread(report_shard, name, replica, 2.5, 9 * GiB)
    page = b.open(f"/nodes/{name}")
    page.wait_for_selector(f'#replicas tr[data-replica="{replica}"]')
    [api] = api_json(b, f"/api/v1/replicas?node={name}")
    [shard] = api["nodes"]
    cells = page.locator(f'#replicas tr[data-replica="{replica}"] td')
    assert cells.nth(0).inner_text() == MODEL
    assert cells.nth(1).inner_text().startswith(api["profile"])
    assert cells.nth(2).inner_text() == ", ".join(str(g) for g in shard["gpus"])
    assert cells.nth(3).inner_text() == "2.50 / 4"
    assert cells.nth(4).inner_text() == "9.00 GiB / 16.0 GiB"
    assert cells.nth(5).inner_text().startswith("ready")
    age = cells.nth(6).locator("time")
    assert age.inner_text().endswith(" ago")
    assert FULL_TIME.search(age.get_attribute("title")), age.get_attribute("title")
    assert cells.nth(7).inner_text() == shard["url"]
    # The engine it runs on sums its shards' use; no engine reads "-" any more.
    engine = page.locator("#engines tbody tr", has_text="llama.cpp").first
    assert engine.locator("td").nth(3).inner_text() == "2.50 cores"
    assert engine.locator("td").nth(4).inner_text() == "9.00 GiB"
    assert "last heartbeat" in page.locator("#heartbeat").inner_text()

    # Not measured (an agent too old to say): unknown, never 0.
    in_own_thread(report_shard, name, replica, None, None)
    page.wait_for_function(
        f"document.querySelector('#replicas tr[data-replica=\"{replica}\"] td.cores')"
        ".textContent.startsWith('unknown')"
    )
    assert page.locator("#replicas td.memory").first.inner_text() == "unknown / 16.0 GiB"
    assert engine.locator("td").nth(3).inner_text() == "unknown"
    in_own_thread(report_shard, name, replica, 2.5, 9 * GiB)
    page.wait_for_function(
        "document.querySelector('#replicas td.cores').textContent.startsWith('2.50')"
    )
    b.shot("node-page")


def test_an_operator_cordons_uncordons_and_labels_from_the_page(browser):
    b = browser
    name = "sim-cpu-03"
    page = b.open(f"/nodes/{name}")
    page.wait_for_selector("#node[data-loaded]")
    assert page.locator("#cordon-state").inner_text().startswith("Schedulable")
    page.fill("#cordon-form input[name=reason]", "fan failure, ticket 4411")
    page.click("#cordon-form button")
    page.wait_for_selector("#cordon-state:has-text('Cordoned')")
    node = api_json(b, f"/api/v1/nodes/{name}")
    assert node["cordoned"] and node["cordon_reason"] == "fan failure, ticket 4411"
    # The reason in words on the page, with who and when: not only a tooltip.
    state = page.locator("#cordon-state").inner_text()
    assert "by operator" in state and "fan failure, ticket 4411" in state, state
    assert "cordoned" in page.locator("#tags").inner_text()

    page.fill("#label-form input[name=key]", "team")
    page.fill("#label-form input[name=value]", "inference")
    page.click("#label-form button")
    page.wait_for_selector('#label-list li[data-key="team"]')
    assert api_json(b, f"/api/v1/nodes/{name}")["operator_labels"]["team"] == "inference"
    assert "team=inference" in page.locator('#label-list li[data-key="team"]').inner_text()
    page.locator("#cordon").scroll_into_view_if_needed()
    b.shot("node-cordoned")

    page.click('#label-list li[data-key="team"] button.remove')
    page.wait_for_selector('#label-list li[data-key="team"]', state="detached")
    assert "team" not in api_json(b, f"/api/v1/nodes/{name}")["operator_labels"]
    page.click("#cordon-form button")  # Uncordon: a reason is optional
    page.wait_for_selector("#cordon-form button:text-is('Cordon')")
    assert not api_json(b, f"/api/v1/nodes/{name}")["cordoned"]
    # No reason, no cordon: the page says why without asking the server.
    page.click("#cordon-form button")
    assert "needs a reason" in page.locator("#action-note").inner_text()


@pytest.fixture
def prometheus_url(monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the Prometheus of the charts test will listen: the server
    process reads it from its environment, so it is set before it starts."""
    from tests.servers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("LLMGW_PROMETHEUS_URL", url)
    # The fleet beat once, at its start: its numbers stay exported meanwhile.
    monkeypatch.setenv("LLMGW_MEASUREMENT_MAX_AGE_S", "3600")
    return url


@contextmanager
def prometheus_scraping(site: str, url: str, tmp_path: Path) -> Iterator[None]:
    """Debian's prometheus scraping the server as production does, every second."""
    from django.contrib.auth.models import User

    from tests.console.conftest import USER
    from tests.console.test_prometheus import scrape_config
    from tests.tokens import make_token

    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is installed by make services"
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "token").write_text(make_token(User.objects.get(username=USER)))
    config = tmp_path / "prometheus.yml"
    # Every 5 s, not every second: this test needs one sample of one shard,
    # and the seventeen targets a second of the production layout outran a
    # loaded machine (each scrape timed out at 1 s, and none landed in 90 s).
    config.write_text(scrape_config(site.removeprefix("http://"), tmp_path / "token", "5s"))
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
    argv.append(f"--web.listen-address={url.removeprefix('http://')}")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_the_charts_say_their_units_and_the_day_and_zone_of_their_times(
    prometheus_url, browser, tmp_path
):
    from tests.console.test_prometheus import scrape_errors

    b = browser
    replica, name = in_own_thread(place, MODEL)
    in_own_thread(report_shard, name, replica, 2.5, 9 * GiB)
    with prometheus_scraping(b.url, prometheus_url, tmp_path / "prometheus"):
        # The page asks for an hour in 15 s steps: wait until a step lands
        # after the first scrape.
        query = f'sum by (model) (llmgw_shard_cpu_cores{{node="{name}"}})'
        for _ in range(90):
            end = time.time()
            params = {"query": query, "start": end - 3600, "end": end, "step": 15}
            try:
                answer = httpx.get(f"{prometheus_url}/api/v1/query_range", params=params)
                # Prometheus answers 503 in plain text while it starts.
                got = answer.json() if answer.status_code == 200 else {}
            except httpx.HTTPError:
                got = {}
            if got.get("status") == "success" and got["data"]["result"]:
                break
            time.sleep(1)
        else:
            errors = scrape_errors(prometheus_url)
            raise AssertionError(f"Prometheus had no step of {query} after 90 s: {got}; {errors}")
        # Opened again while the chart is empty: on a loaded machine a
        # scrape can time out after the first, and the series then has no
        # value at the page's own 15 s steps until the next scrape lands.
        for _ in range(6):
            page = b.open(f"/nodes/{name}")
            cores = page.locator("#charts .chart", has_text="Cores per model")
            try:
                cores.locator("svg").wait_for(timeout=15_000)
                break
            except PlaywrightTimeout:
                continue
        cores.locator("svg").wait_for()
        ticks = cores.locator(".axis.y .tick text").all_text_contents()
        # Cores as cores, "0.5", never d3's SI "500m" (milli-cores).
        assert ticks and not any(t.endswith("m") for t in ticks), ticks
        assert "0.5" in ticks or "1" in ticks, ticks
        assert cores.locator(".axis-label.y").text_content() == "cores"
        span = cores.locator(".axis-label.x").text_content()
        # "6 Dec 2026, 03:58–04:58 UTC": the day and the zone of the ticks.
        assert re.search(r"\b2\d{3}, \d{2}:\d{2}–\d{2}:\d{2} \S+$", span), span
        memory = page.locator("#charts .chart", has_text="Memory per model")
        assert memory.locator(".axis-label.y").text_content() == "bytes"
        assert "GiB" in " ".join(memory.locator(".axis.y .tick text").all_text_contents())
        # Hovering reads the series at that moment, with its full time.
        cores.locator("rect.hover-area").hover()
        readout = cores.locator(".readout").inner_text()
        assert FULL_TIME.search(readout) and f"{MODEL}: 2.5" in readout, readout
        # The charts close up: a full page makes their axes unreadably small.
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator("#charts").screenshot(path=str(ARTIFACTS / "node-charts.png"))


def test_a_viewer_sees_no_control_it_cannot_use(site, chromium, monkeypatch):
    """The node and cluster pages as a viewer reads them: what the node runs,
    its cordon and labels, and no form or button only an operator may use;
    the server still refuses a viewer's cordon."""
    from django.contrib.auth.models import User

    from llmgw.accounts import roles
    from tests.console.conftest import Browser

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    name = "sim-h100-01"
    roles.grant(User.objects.create_user("viewer", password=PASSWORD), roles.VIEWER)
    in_own_thread(cordon, name)
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    b = Browser(context.new_page(), site)
    b.page.goto(site + "/login/")
    b.page.fill("input[name=username]", "viewer")
    b.page.fill("input[name=password]", PASSWORD)
    b.page.click("button[type=submit]")
    b.page.wait_for_url(site + "/")
    page = b.open(f"/nodes/{name}")
    page.wait_for_selector("#facility table.facility-domains")
    page.wait_for_selector("#cordon-state:has-text('Cordoned')")
    assert "XID 79 on GPU 3" in page.locator("#cordon-state").inner_text()
    assert page.locator("#label-list li").count() > 0
    for control in ("#cordon-form", "#label-form", "form.facility-location", "#label-list button"):
        assert page.locator(control).count() == 0, control
    assert page.locator("#facility button, #facility input").count() == 0
    assert page.locator("#node button, #node input, #node form").count() == 0
    b.expect_error("403")
    refused = page.evaluate(
        """async (name) => {
            const csrf = document.cookie.match(/csrftoken=([^;]+)/)[1];
            const r = await fetch(`/api/v1/nodes/${name}/uncordon`, {method: "POST",
                headers: {"Content-Type": "application/json", "X-CSRFToken": csrf}, body: "{}"});
            return r.status;
        }""",
        name,
    )
    assert refused == 403
    page.locator("#facility").scroll_into_view_if_needed()
    b.shot("node-viewer")
    # The cluster page has only its filters: nothing that changes a node.
    page = b.open("/")
    assert page.locator("table.nodes button, table.nodes input, table.nodes form").count() == 0
    context.close()
    assert b.unexpected() == [], b.unexpected()


def cordon(name: str) -> None:
    from llmgw.inventory import services

    services.cordon(name, "XID 79 on GPU 3", "operator")
