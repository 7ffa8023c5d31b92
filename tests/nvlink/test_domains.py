"""NVLink domains on the simulated NVL72 rack, through the real agent API."""

from __future__ import annotations

import pytest

from llmgw.catalog import services as catalog
from llmgw.cli.simulate import run as simulate
from llmgw.inventory.gpu_health import domain_of
from llmgw.serving import placing

pytestmark = pytest.mark.django_db(transaction=True)

GB200_MODEL = """
models:
  - name: big
    source: hf://x/big
    profiles:
      - name: nvl
        gpu_class: GB200-186GB
        gpus_per_shard: 4
        nodes_per_replica: 4
"""


@pytest.fixture
def rack(live_server, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    assert simulate(live_server.url, 0, 10, "sim", True, nvl72_trays=18) == 0


def test_the_api_lists_the_domain_and_says_why_a_tray_is_out(rack, api):
    data = api.get("/api/v1/nvlink").json()
    [domain] = data["domains"]
    assert domain["cluster_uuid"] == "7f3c2a10-5b8e-4d21-9c6f-2e8a1b4d9c01"
    assert len(domain["trays"]) == 18 and domain["joined_trays"] == 17
    assert domain["gpus"] == 72 and domain["joined_gpus"] == 68
    [out] = [t for t in domain["trays"] if not t["joined"]]
    assert out["node"] == "sim-gb200-t07"
    assert out["held_out_because"] == [
        "GPU 2: fabric registration completed with status insufficient_resources"
    ]


def test_a_multi_node_replica_lands_inside_the_domain(rack):
    catalog.apply_text(GB200_MODEL)
    replica, result = placing.place_replica("big")
    assert replica is not None, result.explanation.render()
    decision = result.decision
    assert decision.fabric == "nvlink:7f3c2a10-5b8e-4d21-9c6f-2e8a1b4d9c01/32766"
    assert decision.env.get("NCCL_MNNVL_ENABLE") == "1"
    assert "sim-gb200-t07" not in decision.nodes and len(decision.nodes) == 4
    explained = placing.explain("big")
    assert explained["route"].startswith("inside NVLink domain 7f3c2a10")
    assert "NCCL_MNNVL_ENABLE=1" in explained["route"]
    refusals = {
        n["node"]: (r["code"], n["message"])
        for a in explained["attempts"]
        for r in a["reasons"]
        for n in r["nodes"]
    }
    assert refusals["sim-gb200-t07"] == (
        "nvlink_domain",
        "sim-gb200-t07 is kept out of the NVLink domain: "
        "GPU 2: fabric registration completed with status insufficient_resources",
    )


def test_an_all_zero_cluster_is_no_domain():
    assert (
        domain_of({"state": "completed", "cluster_uuid": "00000000-0000-0000-0000-000000000000"})
        is None
    )
    assert domain_of(None) is None
    assert domain_of({"cluster_uuid": "abc", "clique_id": 3}) == "abc/3"


def test_a_tray_taken_out_and_brought_back_live(rack, api, live_server, settings):
    from llmgw.cli.simulate import event

    event("tray-out", "sim-gb200-t03", [])
    event("tray-in", "sim-gb200-t07", [])
    assert simulate(live_server.url, 0, 10, "sim", True, nvl72_trays=18) == 0
    [domain] = api.get("/api/v1/nvlink").json()["domains"]
    out = {t["node"]: t["held_out_because"] for t in domain["trays"] if not t["joined"]}
    assert out == {"sim-gb200-t03": ["IMEX is down"]}
    event("reset", "", [])
    assert simulate(live_server.url, 0, 10, "sim", True, nvl72_trays=18) == 0
    [domain] = api.get("/api/v1/nvlink").json()["domains"]
    assert [t["node"] for t in domain["trays"] if not t["joined"]] == ["sim-gb200-t07"]
