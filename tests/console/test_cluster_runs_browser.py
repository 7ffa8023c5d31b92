"""The cluster page says what runs on each node and where each node is, in
Chromium against the real server and the demo-like fleet: the models of
its replicas in a cell of their own, and a location of the levels its
labels name (the simulator's nodes name no site), never "-/hall1/..."."""

from __future__ import annotations

import pytest

from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def api_json(b, path):
    return b.page.evaluate("p => fetch(p).then(r => r.json())", path)


def place(model: str) -> str:
    from llmgw.serving import services

    replica, placement, _ = services.place_by_hand(model)
    assert replica is not None, placement
    return str(replica.shards.get().node.name)


def test_the_cluster_page_shows_what_runs_where_and_only_known_places(browser):
    b = browser
    first = in_own_thread(place, "qwen2.5-7b-instruct")
    placed = [first, in_own_thread(place, "qwen2.5-7b-instruct")]
    page = b.open("/")
    for name in set(placed):
        runs = page.locator(f'tr[data-node="{name}"] td.runs').inner_text()
        count = placed.count(name)
        assert runs == ("qwen2.5-7b-instruct" + (f" ×{count}" if count > 1 else "")), runs
    idle = next(n["name"] for n in api_json(b, "/api/v1/nodes?limit=100")["results"]
                if n["name"] not in placed)  # fmt: skip
    assert page.locator(f'tr[data-node="{idle}"] td.runs').inner_text() == "nothing"

    node = api_json(b, f"/api/v1/nodes/{first}")
    labels = node["labels"]
    assert "llmgw.io/site" not in labels  # the simulator names room, row, rack and PDU
    where = page.locator(f'tr[data-node="{first}"] td.location')
    expected = "/".join(labels[f"llmgw.io/{level}"] for level in ("room", "row", "rack"))
    assert where.inner_text() == f"{expected} {labels['llmgw.io/pdu']}"
    assert where.get_attribute("title").startswith("site unknown · room ")
    # A node no label places at all says so in a word.
    from llmgw.inventory.models import Node

    bare = "sim-vm-12"
    Node.objects.filter(name=bare).update(agent_labels={}, operator_labels={})
    page = b.open("/")
    assert page.locator(f'tr[data-node="{bare}"] td.location').inner_text() == "unknown"
    page.locator(f'tr[data-node="{first}"]').scroll_into_view_if_needed()
    b.shot("cluster-runs")
