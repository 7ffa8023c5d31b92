"""Cordons, labels, readiness: what operators own and what they read."""

from __future__ import annotations

from datetime import timedelta

from llmgw.inventory import services
from llmgw.inventory.models import Node
from tests.payloads import heartbeat, registration


def test_a_cordon_survives_re_registration(make_node, agent_client, api):
    _, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    response = api.post("/api/v1/nodes/gpu-1/cordon", {"reason": "XID 79 on GPU 3"}, format="json")
    assert response.status_code == 200 and response.json()["cordoned_by"] == "ops"
    agent.post("register", registration("gpu-1", labels={}))
    agent.post("heartbeat", heartbeat("gpu-1"))
    node = api.get("/api/v1/nodes/gpu-1").json()
    assert node["cordoned"] is True
    assert node["cordon_reason"] == "XID 79 on GPU 3"


def test_a_cordon_needs_a_reason(make_node, api):
    make_node("gpu-1")
    response = api.post("/api/v1/nodes/gpu-1/cordon", {"reason": " "}, format="json")
    assert response.status_code == 400 and "reason" in response.json()["detail"]


def test_operator_labels_win_over_the_agents(make_node, agent_client, api):
    _, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1", labels={"llmgw.io/rack": "r1", "zone": "a"}))
    api.post("/api/v1/nodes/gpu-1/labels", {"labels": {"llmgw.io/rack": "r7"}}, format="json")
    agent.post("register", registration("gpu-1", labels={"llmgw.io/rack": "r1", "zone": "a"}))
    assert api.get("/api/v1/nodes/gpu-1").json()["labels"] == {"llmgw.io/rack": "r7", "zone": "a"}
    api.post("/api/v1/nodes/gpu-1/labels", {"labels": {"llmgw.io/rack": None}}, format="json")
    assert api.get("/api/v1/nodes/gpu-1").json()["labels"]["llmgw.io/rack"] == "r1"


def test_not_ready_after_three_missed_heartbeats(make_node, agent_client, api):
    node, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1", heartbeat_interval_s=10))
    agent.post("heartbeat", heartbeat("gpu-1"))
    assert api.get("/api/v1/nodes/gpu-1").json()["state"] == "Ready"

    # From the beat as stored: now() here comes after the GET above, which
    # took over a second on a loaded machine and marked the node at "29 s".
    node.refresh_from_db()
    last = node.last_heartbeat_at
    assert services.mark_missed_heartbeats(last + timedelta(seconds=29)) == []
    assert services.mark_missed_heartbeats(last + timedelta(seconds=31)) == ["gpu-1"]
    node.refresh_from_db()
    assert node.state == "NotReady"

    # Read from the timestamps too: the API is right before the worker runs.
    Node.objects.filter(pk=node.pk).update(
        state="Ready", last_heartbeat_at=last - timedelta(seconds=31)
    )
    assert api.get("/api/v1/nodes/gpu-1").json()["state"] == "NotReady"
    agent.post("heartbeat", heartbeat("gpu-1"))
    assert api.get("/api/v1/nodes/gpu-1").json()["state"] == "Ready"


def test_unknown_disk_and_memory_are_null(make_node, agent_client, api):
    _, credential = make_node("old-agent")
    agent = agent_client(credential)
    agent.post(
        "register", registration("old-agent", system={"cpus": None, "memory_total_bytes": None})
    )
    payload = heartbeat("old-agent")
    del payload["filesystems"]
    agent.post("heartbeat", payload)
    node = api.get("/api/v1/nodes/old-agent").json()
    assert node["filesystems"] == []
    assert node["disk_local"] is None and node["disk_shared"] is None
    assert node["memory_total_bytes"] is None and node["cpus"] is None


def test_shared_filesystems_are_kept_out_of_the_nodes_own_total(make_node, agent_client, api):
    _, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    agent.post("heartbeat", heartbeat("gpu-1"))
    node = api.get("/api/v1/nodes/gpu-1").json()
    assert node["disk_local"] == {"free_bytes": 600 * 2**30, "total_bytes": 1000 * 2**30}
    assert node["disk_shared"] == {"free_bytes": 500 * 2**40, "total_bytes": 900 * 2**40}
    assert {f["mount"]: f["shared"] for f in node["filesystems"]} == {
        "/data": False,
        "/lustre": True,
    }


def test_the_node_list_costs_a_fixed_number_of_queries(
    make_node, agent_client, api, django_assert_num_queries
):
    for i in range(5):
        _, credential = make_node(f"gpu-{i}")
        agent_client(credential).post("register", registration(f"gpu-{i}"))
        agent_client(credential).post("heartbeat", heartbeat(f"gpu-{i}"))
    # token, roles, count, nodes, filesystems, gpus, holdings and the record
    # of when the control plane could hear (llmgw.inventory.readiness): the
    # same for 5 nodes or a page of 1,000 (tests/inventory/test_node_list.py pages).
    with django_assert_num_queries(8):
        assert api.get("/api/v1/nodes").json()["count"] == 5


def test_the_api_needs_a_login(client, db):
    assert client.get("/api/v1/nodes").status_code in (401, 403)
    assert client.get("/metrics").status_code == 401
    assert client.get("/").status_code == 302
    assert client.get("/api/schema/").status_code in (401, 403)
