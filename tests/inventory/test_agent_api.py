"""The agent API: identity, validation, and what a heartbeat stores."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from llmgw.inventory.models import AuditEvent, Filesystem, ModelHolding, Node
from llmgw.serving import desired
from tests.payloads import heartbeat, registration


def test_join_token_works_once(client, db):
    from llmgw.inventory import services

    token = services.add_node("gpu-1", "test")
    body = {"schema": 1, "node": "gpu-1", "token": token}
    first = client.post("/api/agent/v1/join", body, content_type="application/json")
    assert first.status_code == 200
    assert first.json()["credential"].startswith("gpu-1.")
    again = client.post("/api/agent/v1/join", body, content_type="application/json")
    assert again.status_code == 403
    node = Node.objects.get(name="gpu-1")
    assert token not in node.credential_hash + node.join_token_hash  # only digests stored


def test_register_then_heartbeat_stores_the_node(make_node, agent_client):
    node, credential = make_node("gpu-1")
    agent = agent_client(credential)
    assert agent.post("register", registration("gpu-1")).status_code == 200
    answer = agent.post("heartbeat", heartbeat("gpu-1"))
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "node": "gpu-1",
        "state": "Ready",
        "register": False,
        "desired": {"engines": [], "shards": []},
        "desired_digest": desired.digest({"engines": [], "shards": []}),
    }
    node.refresh_from_db()
    assert node.memory_total_bytes == 1623497637888
    assert node.cpus == 192
    assert node.memory_available_bytes == 90 * 2**30
    assert {fs.mount: fs.shared for fs in node.filesystems.all()} == {
        "/data": False,
        "/lustre": True,
    }
    assert [h.model_name for h in node.holdings.all()] == ["qwen2.5-7b"]


def test_a_heartbeat_before_registration_asks_for_it(make_node, agent_client):
    _, credential = make_node("gpu-1")
    assert agent_client(credential).post("heartbeat", heartbeat("gpu-1")).json()["register"] is True


def test_node_a_credential_refused_for_node_b(make_node, agent_client):
    _, credential_a = make_node("node-a")
    make_node("node-b")
    agent_b_impostor = agent_client(credential_a)
    for path, payload in (("register", registration("node-b")), ("heartbeat", heartbeat("node-b"))):
        refused = agent_b_impostor.post(path, payload)
        assert refused.status_code == 403
        assert "node-a" in refused.json()["errors"]["node"][0]
    node_b = Node.objects.get(name="node-b")
    assert node_b.registered_at is None and node_b.last_heartbeat_at is None
    logged = AuditEvent.objects.filter(action="impersonation-refused", node_name="node-a")
    assert logged.count() == 2


def test_a_wrong_or_revoked_credential_is_refused(make_node, agent_client):
    from llmgw.inventory import services

    node, credential = make_node("gpu-1")
    assert agent_client(credential + "x").post("heartbeat", heartbeat("gpu-1")).status_code == 401
    assert agent_client(credential).post("heartbeat", heartbeat("gpu-1")).status_code == 200
    services.revoke_node("gpu-1", "test")
    # Refused at once: there is no cache of credentials, the heartbeat's
    # UPDATE checks the credential itself. And nothing was written.
    before = Node.objects.filter(pk=node.pk).values().get()
    assert agent_client(credential).post("heartbeat", heartbeat("gpu-1")).status_code == 401
    assert Node.objects.filter(pk=node.pk).values().get() == before


def test_refusals_keep_their_order(make_node, agent_client, client, settings):
    """A stranger gets 401 whatever it sent; the limit, the payload and the
    node's name are judged only for a known credential."""
    settings.AGENT_MAX_PAYLOAD_BYTES = 2048
    _, credential = make_node("gpu-1")
    stranger = agent_client(credential + "x")
    assert stranger.post("heartbeat", {"schema": 2}).status_code == 401
    assert stranger.post("heartbeat", b"{" + b" " * 4096 + b"}").status_code == 401
    assert stranger.post("heartbeat", heartbeat("gpu-2")).status_code == 401
    assert (
        client.post(
            "/api/agent/v1/heartbeat", heartbeat("gpu-1"), content_type="application/json"
        ).status_code
        == 401
    )
    assert (
        client.get("/api/agent/v1/heartbeat", HTTP_AUTHORIZATION=f"Node {credential}").status_code
        == 405
    )
    assert client.get("/api/agent/v1/heartbeat").status_code == 401
    assert agent_client(credential).post("heartbeat", b"{" + b" " * 4096 + b"}").status_code == 413


def test_a_bad_payload_is_refused_with_field_errors_and_nothing_changes(make_node, agent_client):
    node, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    agent.post("heartbeat", heartbeat("gpu-1"))
    before = (Node.objects.filter(pk=node.pk).values().get(), list(Filesystem.objects.values()))

    bad = heartbeat("gpu-1")
    bad["cpu"]["utilization_percent"] = 250
    bad["filesystems"][1]["free_bytes"] = -5
    bad["memory"] = {"used_bytes": "lots", "available_bytes": 1}
    bad["filesystems"][0]["free_bytes"] = 1
    response = agent.post("heartbeat", bad)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert set(errors) == {
        "cpu.utilization_percent",
        "filesystems.1.free_bytes",
        "memory.used_bytes",
    }
    assert (
        Node.objects.filter(pk=node.pk).values().get(),
        list(Filesystem.objects.values()),
    ) == before

    wrong_schema = agent.post("register", registration("gpu-1", schema=2, system={"cpus": 0}))
    assert wrong_schema.status_code == 400
    assert set(wrong_schema.json()["errors"]) == {"schema", "system.cpus"}
    assert (
        agent.post("heartbeat", b"{not json").json()["errors"]["payload"][0].startswith("not JSON")
    )


def test_an_oversized_payload_is_refused(make_node, agent_client, settings):
    settings.AGENT_MAX_PAYLOAD_BYTES = 2048
    _, credential = make_node("gpu-1")
    huge = heartbeat("gpu-1", collectors=[{"name": "x" * 60, "ok": True, "seconds": 0.1}] * 60)
    response = agent_client(credential).post("heartbeat", huge)
    assert response.status_code == 413
    assert "over the limit" in response.json()["errors"]["payload"][0]


def test_a_heartbeat_that_changes_nothing_costs_two_statements_in_django(make_node, agent_client):
    """What the lean path hands on with a valid credential (a certificate's
    node) is served by DRF's view: the credential's SELECT, then the one
    UPDATE of the node row and its filesystems' free space; no BEGIN or
    COMMIT around it. The lean path's one statement is
    test_heartbeat_batch's."""
    _, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    agent.post("heartbeat", heartbeat("gpu-1"))
    with CaptureQueriesContext(connection) as queries:
        assert agent.post("heartbeat", heartbeat("gpu-1")).status_code == 200
    authenticate, update = queries.captured_queries
    assert authenticate["sql"].startswith("SELECT") and "UPDATE" in update["sql"]


def test_changed_filesystems_and_weights_are_replaced(make_node, agent_client):
    node, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    agent.post("heartbeat", heartbeat("gpu-1"))
    changed = heartbeat("gpu-1")
    changed["filesystems"] = changed["filesystems"][:1]
    changed["weights"] = {"probed": True, "models": []}
    agent.post("heartbeat", changed)
    assert list(node.filesystems.values_list("mount", flat=True)) == ["/data"]
    assert not ModelHolding.objects.filter(node=node).exists()
    node.refresh_from_db()
    assert node.weights_probed is True


def test_a_node_never_asked_for_weights_says_unknown(make_node, agent_client):
    node, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    payload = heartbeat("gpu-1")
    del payload["weights"]
    agent.post("heartbeat", payload)
    node.refresh_from_db()
    assert node.weights_probed is None


@pytest.mark.django_db(transaction=True)
def test_only_the_heartbeat_commits_without_waiting_for_the_disk(make_node, agent_client):
    """Outside a test's transaction, as in production: the one UPDATE turns
    off synchronous commit for its own transaction, and the connection is
    back to durable commits for whatever it runs next."""
    node, credential = make_node("gpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    agent.post("heartbeat", heartbeat("gpu-1"))
    with CaptureQueriesContext(connection) as queries:
        answer = agent.post("heartbeat", heartbeat("gpu-1"))
    assert answer.json() == {
        "node": "gpu-1",
        "state": "Ready",
        "register": False,
        "desired": {"engines": [], "shards": []},
        "desired_digest": desired.digest({"engines": [], "shards": []}),
    }
    _, update = queries.captured_queries
    assert "set_config('synchronous_commit', 'off', true)" in update["sql"]
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    node.refresh_from_db()
    assert node.state == "Ready" and node.memory_available_bytes == 90 * 2**30
    assert {fs.mount for fs in node.filesystems.all()} == {"/data", "/lustre"}


def test_a_number_too_big_for_the_database_is_a_field_error(make_node, agent_client):
    _, credential = make_node("gpu-1")
    payload = heartbeat("gpu-1")
    payload["filesystems"][0]["total_bytes"] = 2**64
    payload["filesystems"][0]["free_bytes"] = 2**64
    response = agent_client(credential).post("heartbeat", payload)
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {
        "filesystems.0.free_bytes",
        "filesystems.0.total_bytes",
    }
