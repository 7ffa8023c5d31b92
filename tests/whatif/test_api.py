"""/api/v1/whatif and `llmgw ctl whatif` on a stored fleet: two racks on two
PDUs, a held model with a replica in each rack."""

from __future__ import annotations

import argparse
import re

import pytest

from llmgw.catalog import services as catalog
from llmgw.cli import ctl_whatif
from llmgw.serving import reconciler
from llmgw.serving.models import Replica
from tests.whatif.stored import add_node, catalog_text

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(make_node, agent_client):
    # Rack r1: a1 (PDU p1), a2 (p2); rack r2: b1 (p1). Eight GPUs each.
    for name, rack, pdu in (("a1", "r1", "p1"), ("a2", "r1", "p2"), ("b1", "r2", "p1")):
        add_node(make_node, agent_client, name, rack=rack, pdu=pdu)
    catalog.apply_text(catalog_text([("big", 2, 8, 64)]))
    reconciler.reconcile_all()
    nodes = sorted(s.node.name for r in Replica.objects.all() for s in r.shards.all())
    # Spread over racks: one in r1, one in r2.
    assert len(nodes) == 2 and "b1" in nodes
    return nodes


# The snapshot placement reads (with the record of when the control plane
# could hear, llmgw.inventory.readiness) and the catalog: a handful of
# queries, whatever the fleet's size.
QUERIES = 16


def test_failing_a_rack_names_what_is_lost_and_where_it_goes(fleet, api, django_assert_num_queries):
    in_r1 = next(n for n in fleet if n != "b1")
    with django_assert_num_queries(QUERIES):
        r = api.get("/api/v1/whatif", {"fail": "rack=r1"})
    assert r.status_code == 200, r.json()
    data = r.json()
    assert data["domain"] == "rack=r1" and data["nodes"] == ["a1", "a2"]
    [lost] = data["lost"]
    assert lost["model"] == "big" and lost["lost_on"] == [in_r1]
    # b1 is full of the other replica: nowhere to go; the model drops to 1 of 2.
    assert lost["replaced"] is False
    assert data["below"] == [{"model": "big", "replicas": 1, "always_running": 2}]
    text = "\n".join(data["lines"])
    assert "a1 is NotReady, needs Ready" in text
    assert "b1 has 0 free H100-80GB GPUs" in text or "b1" in text
    assert "big would be left with 1 of 2 always-running replicas" in text


def test_failing_a_node_the_other_rack_takes_it(fleet, api):
    # Fail the r1 node holding a replica: the other r1 node is free.
    in_r1 = next(n for n in fleet if n != "b1")
    other = "a2" if in_r1 == "a1" else "a1"
    data = api.get("/api/v1/whatif", {"fail": in_r1}).json()
    [lost] = data["lost"]
    assert lost["replaced"] and [s["node"] for s in lost["decision"]["shards"]] == [other]
    assert data["below"] == []
    # Where it goes, as explain prints a decision (its location too, when labelled).
    shown = re.compile(rf"^ +{other}( \(.*\))?: GPUs 0,1,2,3,4,5,6,7, 2 cores")
    assert any(shown.match(line) for line in data["lines"]), data["lines"]


@pytest.mark.parametrize(
    "query, words",
    [
        ({"fail": "rack=r9"}, "unknown domain 'rack=r9': no node is labelled llmgw.io/rack=r9"),
        ({"fail": "bay=1"}, "'bay' is not a level"),
        ({}, "name a domain to fail"),
    ],
)
def test_an_unknown_domain_is_a_400_naming_it(fleet, api, query, words):
    r = api.get("/api/v1/whatif", query)
    assert r.status_code == 400
    assert words in r.json()["fail"][0]


def test_sweep_lists_the_domains_whose_loss_hurts(fleet, api, django_assert_num_queries):
    with django_assert_num_queries(QUERIES):
        data = api.get("/api/v1/whatif/sweep").json()
    assert data["tried"] == 4  # rack=r1, rack=r2, pdu=p1, pdu=p2
    hurt = {h["domain"]: h["below"] for h in data["hurt"]}
    # Rack r1 takes one replica and b1 is full; PDU p1 (a1 and b1) takes
    # b1's and leaves one node of the fleet; rack r2 (b1) and PDU p2 (a2)
    # each lose one replica that the free node takes.
    # Each model's row counts its own replicas lost and not placed again.
    short = {"model": "big", "replicas": 1, "always_running": 2, "not_replaced": 1}
    assert hurt == {"rack=r1": [{**short, "lost": 1}], "pdu=p1": [{**short, "lost": 2}]}
    assert data["lines"][0] == "failed 4 domains (rack, pdu) one at a time: 2 would hurt"
    assert api.get("/api/v1/whatif/sweep", {"levels": "rack,shelf"}).status_code == 400


NEW = """models:
  - name: new-model
    source: hf://x/new
    always_running: 2
    profiles:
      - name: half
        gpu_class: H100-80GB
        gpus_per_shard: 4
        memory_gb: 32
"""


def test_place_answers_for_a_model_not_in_the_catalog(fleet, api, django_assert_num_queries):
    with django_assert_num_queries(QUERIES):
        r = api.post("/api/v1/whatif", {"yaml": NEW}, format="json")
    assert r.status_code == 200, r.json()
    [answer] = r.json()["models"]
    # The one free node takes two halves.
    assert answer["wanted"] == 2 and len(answer["placed"]) == 2
    assert answer["headroom"] == {"half": 0}
    # Nothing was stored.
    assert not Replica.objects.filter(model__name="new-model").exists()


def test_place_refuses_a_bad_file_naming_line_and_field(fleet, api):
    bad = NEW.replace("gpus_per_shard: 4", "gpus_per_shard: four")
    r = api.post("/api/v1/whatif", {"yaml": bad}, format="json")
    assert r.status_code == 400
    assert r.json()["yaml"] == [
        "line 8: models[0].profiles[0].gpus_per_shard: expected a whole number of zero or more, got 'four'"
    ]


def test_ctl_whatif_prints_the_servers_lines(fleet, api, tmp_path):
    class Via:
        def call(self, method, path, body=None):
            r = api.post(path, body, format="json") if method == "POST" else api.get(path)
            return r.json()

    args = argparse.Namespace(domain="rack=r1", json=False, levels="rack,pdu", file="")
    text = ctl_whatif.cmd_fail(Via(), args)
    assert text.startswith("if rack=r1 failed (2 nodes: a1, a2):")
    assert "failed 4 domains (rack, pdu) one at a time" in ctl_whatif.cmd_sweep(Via(), args)
    path = tmp_path / "new.yaml"
    path.write_text(NEW)
    args.file = str(path)
    assert "new-model: 2 of 2 replicas would be placed" in ctl_whatif.cmd_place(Via(), args)


def test_the_power_afterwards_sits_beside_each_cap(fleet, api):
    from llmgw.catalog.models import Profile
    from llmgw.facility import services as facility

    # Each replica declares 5 kW; rack r1 is capped at 20 kW.
    Profile.objects.filter(model__name="big").update(power_w=5000)
    facility.set_budgets([{"domain": "rack=r1", "watts": 20000}])
    in_r1 = next(n for n in fleet if n != "b1")
    data = api.get("/api/v1/whatif", {"fail": in_r1}).json()
    [row] = data["power"]
    # The replica moves within the rack: 5 kW declared there, before and after.
    assert row["domain"] == "rack=r1" and row["cap_w"] == 20000
    assert row["after_w"] is not None and row["after_w"] >= 5000
    assert row["headroom_w"] == row["cap_w"] - row["after_w"]
    text = "\n".join(data["lines"])
    assert "power afterwards, per capped domain:" in text
    assert "rack r1: " in text and "of its 20.0 kW cap" in text, text


def test_place_answers_for_a_new_profile_of_a_running_model(fleet, api):
    # big runs two replicas with its profile "main"; a half-node profile of it
    # is not in the catalog yet, and the file need not name "main".
    text = NEW.replace("new-model", "big").replace("always_running: 2", "always_running: 1")
    r = api.post("/api/v1/whatif", {"yaml": text}, format="json")
    assert r.status_code == 200, r.json()
    [answer] = r.json()["models"]
    [placed] = answer["placed"]
    # The free node: the two with big's replicas have no GPU free.
    assert [s["node"] for s in placed["shards"]] == ["a2" if "a1" in fleet else "a1"]
    assert answer["headroom"] == {"half": 1}
