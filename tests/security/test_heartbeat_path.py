"""A node reports only as itself on the heartbeat's path before Django:
under uvicorn, as in production, a heartbeat naming another node is
refused with 403 and an audit record, a wrong or revoked credential with
401, and none of them writes a thing; the heartbeat a node may send is
stored and moves its last-seen time."""

from __future__ import annotations

import httpx
import pytest

from llmgw.inventory import services
from llmgw.inventory.models import AuditEvent, Node
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db(transaction=True)


def post(server: str, credential: str, payload: dict[str, object]) -> httpx.Response:
    return httpx.post(
        f"{server}/api/agent/v1/heartbeat",
        json=payload,
        headers={"Authorization": f"Node {credential}"},
        timeout=30,
    )


def test_a_node_heartbeats_only_as_itself(asgi_server, make_node):
    node_a, credential_a = make_node("node-a")
    node_b, credential_b = make_node("node-b")
    services.register(node_a, registration("node-a"), None)

    refused = post(asgi_server, credential_a, heartbeat("node-b"))
    assert refused.status_code == 403
    assert refused.json() == {"errors": {"node": ["this credential belongs to node-a"]}}
    assert AuditEvent.objects.filter(action="impersonation-refused", node_name="node-a").exists()

    wrong = credential_b.rpartition(".")[0] + ".not-the-secret"
    assert post(asgi_server, wrong, heartbeat("node-b")).status_code == 401
    services.revoke_node("node-b", "test")
    assert post(asgi_server, credential_b, heartbeat("node-b")).status_code == 401
    assert set(Node.objects.values_list("last_heartbeat_at", flat=True)) == {None}

    stored = post(asgi_server, credential_a, heartbeat("node-a"))
    assert stored.status_code == 200 and stored.json()["node"] == "node-a"
    first = Node.objects.get(name="node-a").last_heartbeat_at
    assert post(asgi_server, credential_a, heartbeat("node-a")).status_code == 200
    node_a.refresh_from_db()
    assert first is not None and node_a.last_heartbeat_at > first
    assert Node.objects.get(name="node-b").last_heartbeat_at is None
