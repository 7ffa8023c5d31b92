"""A card's wear, one threshold in one place: the node page and the GPU map
read the same words from the server (the node page showed "2 PCIe replays"
as wear while the map counted the card among none showing wear)."""

from __future__ import annotations

from pathlib import Path

from llmgw.inventory import gpus
from llmgw.inventory.gpu_health import PCIE_REPLAYS_WORN

STATIC = Path(__file__).resolve().parents[2] / "static" / "console"


def _card(index: int, **wear: object) -> dict[str, object]:
    return {"index": index, "uuid": f"GPU-{index}", "class": "H100-80GB", **wear}


def test_the_node_page_and_the_gpu_map_show_the_same_wear(client, make_node, operator):
    node, _ = make_node("node-a")
    gpus.register(
        node,
        [
            _card(0, pcie_replays=2),
            _card(1, pcie_replays=PCIE_REPLAYS_WORN + 400),
            _card(2, remapped_rows={"correctable": 3}, xids={"79": 1}),
        ],
    )
    client.force_login(operator)
    page = {g["index"]: g["wear"] for g in client.get("/console/api/nodes/node-a").json()["gpus"]}
    [listed] = client.get("/console/api/gpus").json()["nodes"]
    fleet = {g["index"]: g["wear"] for g in listed["gpus"]}
    assert page == fleet
    assert page[0] == {"level": 0, "why": []}
    assert page[1] == {"level": 1, "why": ["500 PCIe replays"]}
    assert page[2] == {"level": 2, "why": ["XID 79", "3 corrected rows"]}


def test_no_page_keeps_a_threshold_of_its_own():
    for script in ("node.js", "gpus.js"):
        assert "pcie_replays" not in (STATIC / script).read_text(), script
