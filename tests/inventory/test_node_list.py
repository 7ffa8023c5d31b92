"""/api/v1/nodes at fleet scale: paged and filtered by the database, every
bad parameter refused by name, and the fleet's summary counted there."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from llmgw.inventory.models import Node
from tests import bulk_fleet

pytestmark = pytest.mark.django_db

# 60 nodes: racks r000-r002 of 20; r000 holds H100s, r001 A100s, r002 L40S.
COUNT = 60


@pytest.fixture
def fleet(db):
    return bulk_fleet.build(COUNT)


def names(api, query):
    response = api.get("/api/v1/nodes" + query)
    assert response.status_code == 200, response.content
    return [n["name"] for n in response.json()["results"]], response.json()


def test_pages_walk_the_fleet_in_name_order_with_a_total(api, fleet):
    seen, url = [], "/api/v1/nodes?limit=25&fields=name"
    while url:
        body = api.get(url).json()
        assert body["count"] == COUNT
        seen += [n["name"] for n in body["results"]]
        url = body["next"]
    assert seen == sorted(fleet) and len(seen) == COUNT
    last = api.get("/api/v1/nodes?limit=25&offset=50").json()
    assert last["next"] is None and "offset=25" in last["previous"]
    assert api.get("/api/v1/nodes?offset=25").json()["previous"].endswith("/api/v1/nodes")


def test_the_default_page_is_a_hundred(api):
    bulk_fleet.build(130)
    body = api.get("/api/v1/nodes").json()
    assert body["count"] == 130 and len(body["results"]) == 100 and "offset=100" in body["next"]


def test_filters_by_state_class_domain_and_name(api, fleet):
    silent = [bulk_fleet.name_of(i) for i in range(COUNT) if bulk_fleet.is_silent(i)]
    cordoned = [bulk_fleet.name_of(i) for i in range(COUNT) if bulk_fleet.is_cordoned(i)]
    assert silent and cordoned
    assert names(api, "?state=NotReady")[0] == silent
    assert names(api, "?state=cordoned")[0] == cordoned
    ready, body = names(api, "?state=Ready&limit=1000")
    assert body["count"] == COUNT - len(silent) and not set(ready) & set(silent)
    # Either of two states: repeated or comma-separated.
    assert names(api, "?state=NotReady,Cordoned")[0] == sorted(silent + cordoned)
    assert names(api, "?state=NotReady&state=Cordoned")[0] == sorted(silent + cordoned)
    a100 = names(api, "?class=A100-40GB")[0]
    assert a100 == [bulk_fleet.name_of(i) for i in range(20, 40)]
    assert names(api, "?domain=rack=r002")[0] == [bulk_fleet.name_of(i) for i in range(40, 60)]
    # One level's values are alternatives; two levels narrow.
    assert len(names(api, "?domain=rack=r000&domain=rack=r002")[0]) == 40
    assert names(api, "?domain=rack=r000&domain=pdu=r000-pdu1")[0] == [
        bulk_fleet.name_of(i) for i in range(10, 20)
    ]
    assert names(api, "?domain=node-00003")[0] == ["node-00003"]
    assert names(api, "?search=0005")[0] == [bulk_fleet.name_of(i) for i in (5, *range(50, 60))]
    assert names(api, "?search=NODE-0000")[0] == [bulk_fleet.name_of(i) for i in range(10)]
    assert names(api, "?class=A100-40GB&domain=rack=r000")[1]["count"] == 0


def test_an_operators_label_wins_in_a_domain_filter(api, fleet):
    api.post(
        "/api/v1/nodes/node-00001/labels", {"labels": {"llmgw.io/rack": "r099"}}, format="json"
    )
    assert names(api, "?domain=rack=r099")[0] == ["node-00001"]
    assert "node-00001" not in names(api, "?domain=rack=r000")[0]


def test_a_silent_node_reads_not_ready_under_the_filter_and_in_the_row(api, fleet):
    Node.objects.filter(name="node-00002").update(
        last_heartbeat_at=timezone.now() - timedelta(hours=4)
    )
    nodes, _ = names(api, "?state=NotReady")
    assert "node-00002" in nodes
    row = api.get("/api/v1/nodes?domain=node-00002").json()["results"][0]
    assert row["state"] == "NotReady"


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?limit=0", "limit: from 1 to 1000"),
        ("?limit=1001", "limit: from 1 to 1000"),
        ("?limit=ten", "limit: a whole number"),
        ("?offset=-1", "offset: from 0"),
        ("?state=Redy", "state: 'Redy': one of Ready, NotReady, Cordoned"),
        ("?domain=bay=3", "domain: 'bay' is not a level"),
        ("?domain=rack=", "domain: rack= needs a value"),
        ("?fields=name,password", "fields: password is not a field"),
        ("?stat=Ready", "stat: unknown parameter"),
        ("?search=" + "x" * 300, "search: at most 253 characters"),
        ("?search=%00", "search: contains a NUL"),
    ],
)
def test_a_bad_parameter_is_refused_by_name(api, fleet, query, named):
    response = api.get("/api/v1/nodes" + query)
    assert response.status_code == 400
    assert response.json()["detail"].startswith(named), response.json()


def test_fields_answer_only_what_was_asked_and_as_the_full_row_says(api, fleet):
    full = api.get("/api/v1/nodes?domain=node-00000").json()["results"][0]
    asked = "name,state,disk_local,gpu_classes,labels"
    row = api.get(f"/api/v1/nodes?domain=node-00000&fields={asked}").json()["results"][0]
    assert sorted(row) == sorted(asked.split(","))  # in the full row's order
    assert {k: full[k] for k in row} == row
    assert row["gpu_classes"] == {"H100-80GB": 8} and len(full["gpus"]) == 8


def test_every_plain_field_reads_as_the_full_row_for_every_node(
    api, fleet, make_node, agent_client
):
    """Asked without the nested rows, a page is written from plain values
    (NodeSerializer.plain_rows); it must say what the full row says, field
    by field, for reported nodes, silent ones and one whose agent said
    nothing of its system (null, not "")."""
    from llmgw.inventory.api.serializers import NodeSerializer
    from tests.payloads import heartbeat, registration

    _, known = make_node("gpu-1")
    agent_client(known).post("register", registration("gpu-1"))
    agent_client(known).post("heartbeat", heartbeat("gpu-1"))
    _, old = make_node("old-agent")
    agent_client(old).post("register", registration("old-agent", labels={}, system={}))
    nested = {"filesystems", "gpus", "holdings"}
    plain = [f for f in NodeSerializer.Meta.fields if f not in nested]
    full = api.get("/api/v1/nodes?limit=1000").json()["results"]
    asked = "".join(f"&fields={f}" for f in plain)  # one at a time: each is a short text
    rows = api.get(f"/api/v1/nodes?limit=1000{asked}").json()["results"]
    assert len(rows) == COUNT + 2
    assert rows == [{k: node[k] for k in plain} for node in full]
    assert {r["name"]: r["os"] for r in rows}["old-agent"] is None


def test_a_page_costs_the_same_queries_for_10_nodes_or_1000(api, django_assert_max_num_queries):
    bulk_fleet.build(10)
    fields = "name,state,cordoned,cpus,memory_total_bytes,disk_local,gpu_classes,labels,engines"
    # token, roles, count, nodes, disks, cards per class, and the record of
    # when the control plane could hear (llmgw.inventory.readiness).
    with django_assert_max_num_queries(7):
        assert len(api.get(f"/api/v1/nodes?fields={fields}").json()["results"]) == 10
    bulk_fleet.build(990, start=10)
    with django_assert_max_num_queries(7):
        assert len(api.get(f"/api/v1/nodes?limit=1000&fields={fields}").json()["results"]) == 1000


def test_the_summary_counts_the_fleet_and_what_the_filters_pick(api, fleet):
    s = api.get("/api/v1/nodes/summary").json()
    silent = sum(1 for i in range(COUNT) if bulk_fleet.is_silent(i))
    assert (s["nodes"], s["ready"], s["not_ready"]) == (COUNT, COUNT - silent, silent)
    assert s["cordoned"] == sum(1 for i in range(COUNT) if bulk_fleet.is_cordoned(i))
    assert s["cpus"] == COUNT * 192 and s["cpus_unknown"] == 0
    assert {g["gpu_class"]: g["count"] for g in s["gpus"]} == {
        "H100-80GB": 160,
        "A100-40GB": 160,
        "L40S-48GB": 160,
    }
    # The silent nodes' cards are counted apart (node-00007, node-00057).
    assert {g["gpu_class"]: (g["ready"], g["not_ready"]) for g in s["gpus"]} == {
        "H100-80GB": (152, 8),
        "A100-40GB": (160, 0),
        "L40S-48GB": (152, 8),
    }
    assert s["weights"] == [{"model": "llama-3.1-8b", "nodes": 20}]
    rack = api.get("/api/v1/nodes/summary?domain=rack=r001").json()
    assert rack["nodes"] == 20 and [g["gpu_class"] for g in rack["gpus"]] == ["A100-40GB"]
    assert api.get("/api/v1/nodes/summary?limit=5").json()["detail"].startswith("limit: unknown")


def test_the_cluster_page_counts_a_silent_nodes_cards_apart(client, operator, fleet):
    client.force_login(operator)
    page = client.get("/").content.decode()
    row = page[page.index('<tr data-class="H100-80GB">') :]
    row = row[: row.index("</tr>")]
    assert '<td class="cards">152 <span class="tag bad"' in row and "+ 8 NotReady" in row, row


def test_the_summary_says_unknown_rather_than_zero(api, fleet):
    Node.objects.update(cpus=None, memory_total_bytes=None)
    s = api.get("/api/v1/nodes/summary").json()
    assert s["cpus"] is None and s["cpus_unknown"] == COUNT
    assert s["memory_total_bytes"] is None and s["memory_unknown"] == COUNT


def test_a_viewer_reads_the_list_and_nobody_else_does(client, fleet):
    assert client.get("/api/v1/nodes").status_code in (401, 403)
    assert client.get("/api/v1/nodes/summary").status_code in (401, 403)
