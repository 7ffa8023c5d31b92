"""A model already below always_running is said apart from what a failure
would add: with tiny at 0 of 1 before anything failed, the sweep blamed
every domain for it, and the held page's table counted other models'
replicas as the opened model's losses."""

from __future__ import annotations

import pytest

from llmgw.catalog import services as catalog
from llmgw.serving import reconciler
from llmgw.serving.models import Replica
from tests.whatif.stored import add_node, catalog_text

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(make_node, agent_client):
    # Rack r1: a1 (PDU p1), a2 (p2); rack r2: b1 (p1). Eight GPUs each.
    for name, rack, pdu in (("a1", "r1", "p1"), ("a2", "r1", "p2"), ("b1", "r2", "p1")):
        add_node(make_node, agent_client, name, rack=rack, pdu=pdu)
    # big fills b1 and one r1 node; small the other r1 node; tiny asks for
    # more memory than any node has, so it is short before anything fails.
    catalog.apply_text(catalog_text([("big", 2, 8, 64), ("small", 1, 8, 64), ("tiny", 1, 8, 4096)]))
    reconciler.reconcile_all()
    placed = {
        m: sorted(
            s.node.name for r in Replica.objects.filter(model__name=m) for s in r.shards.all()
        )
        for m in ("big", "small", "tiny")
    }
    assert len(placed["big"]) == 2 and "b1" in placed["big"], placed
    assert len(placed["small"]) == 1 and placed["small"][0] in ("a1", "a2"), placed
    assert placed["tiny"] == [], placed
    return placed


def test_the_sweep_blames_no_domain_for_a_model_already_short(fleet, api):
    data = api.get("/api/v1/whatif/sweep").json()
    assert data["already_short"] == [{"model": "tiny", "replicas": 0, "always_running": 1}]
    assert data["lines"][1] == (
        "  tiny is already at 0 of 1 always-running replicas, before any failure"
    )
    assert all(b["model"] != "tiny" for h in data["hurt"] for b in h["below"]), data["hurt"]
    # Rack r1 takes big's replica there and small's, and the fleet is full:
    # each model's row counts its own replicas, not the other's.
    rack = next(h for h in data["hurt"] if h["domain"] == "rack=r1")
    assert (rack["lost"], rack["not_replaced"]) == (2, 2)
    assert rack["below"] == [
        {"model": "big", "replicas": 1, "always_running": 2, "lost": 1, "not_replaced": 1},
        {"model": "small", "replicas": 0, "always_running": 1, "lost": 1, "not_replaced": 1},
    ]


def test_a_single_failure_says_the_shortfall_that_exists_now_apart(fleet, api):
    # a2's or a1's loss: whichever r1 node small is not on holds big.
    free_of_small = "a1" if fleet["small"] == ["a2"] else "a2"
    data = api.get("/api/v1/whatif", {"fail": free_of_small}).json()
    assert data["already_short"] == [{"model": "tiny", "replicas": 0, "always_running": 1}]
    assert data["below"] == [{"model": "big", "replicas": 1, "always_running": 2}]
    text = "\n".join(data["lines"])
    assert "  tiny is already at 0 of 1 always-running replicas, before any failure" in text
    assert "tiny would be left" not in text
    assert "big would be left with 1 of 2 always-running replicas" in text
