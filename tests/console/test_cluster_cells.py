"""The cluster table's cells over a page of rows: the models each node
runs, read in one query for the page, and a location of only the levels
its labels name."""

from __future__ import annotations

import pytest

from llmgw.catalog import services as catalog
from llmgw.console import cluster
from llmgw.serving import services as serving
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db

PROFILE = "    profiles:\n      - name: cpu\n        memory_gb: 1\n        cpu_cores: 1\n"
CATALOG = "models:\n" + "".join(
    f"  - name: {m}\n    source: hf://x/{m}\n{PROFILE}" for m in ("a", "b", "c", "d")
)


def test_a_page_of_rows_gets_its_models_in_one_query(
    make_node, agent_client, django_assert_num_queries
):
    _, credential = make_node("cpu-1")
    agent_client(credential).post("register", registration("cpu-1"))
    agent_client(credential).post("heartbeat", heartbeat("cpu-1"))
    catalog.apply_text(CATALOG)
    for model in ("a", "a", "b"):
        assert serving.place_by_hand(model)[0] is not None
    with django_assert_num_queries(1):
        found = cluster.runs(["cpu-1", "cpu-2"])
    assert found == {"cpu-1": [("a", 2), ("b", 1)]}
    rows = [{"name": "cpu-1"}, {"name": "cpu-2"}]
    cluster._with_runs(rows)
    assert rows[0]["runs"] == "a ×2, b" and rows[0]["runs_more"] == 0
    assert rows[1]["runs"] == "" and rows[1]["runs_title"] == ""
    # Past two models the cell counts the rest; its title names them all.
    for model in ("c", "d"):
        assert serving.place_by_hand(model)[0] is not None
    cluster._with_runs(rows)
    assert rows[0]["runs"] == "a ×2, b" and rows[0]["runs_more"] == 2
    assert rows[0]["runs_title"] == "a ×2, b, c, d"


def test_a_location_names_only_the_levels_known() -> None:
    row = cluster._with_location(
        {"labels": {"llmgw.io/room": "hall1", "llmgw.io/rack": "r01", "llmgw.io/pdu": "p0"}}
    )
    assert row["location"] == "hall1/r01" and row["pdu"] == "p0"
    assert row["location_title"] == "site unknown · room hall1 · row unknown · rack r01"
    assert cluster._with_location({"labels": {}})["location"] == ""
