"""The heartbeat's path before Django (heartbeat_asgi): what it stores
itself never reaches Django, and what it does not is handed to Django with
its body intact and nothing written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmgw.inventory import services
from llmgw.inventory.api.heartbeat_asgi import PATH
from llmgw.inventory.models import Node
from llmgw.serving import desired
from tests.inventory.lean_path import post
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db(transaction=True)


def call(
    body: bytes, credential: str, chunks: int = 1, scheme: str = "Node", **scope: Any
) -> dict[str, Any]:
    headers = [
        (b"authorization", f"{scheme} {credential}".encode()),
        (b"content-type", b"application/json"),
    ]
    return post(PATH, body, headers, chunks, **scope)


@pytest.fixture
def gpu1(make_node: Any) -> str:
    node, credential = make_node("gpu-1")
    services.register(node, registration("gpu-1"), None)
    return str(credential)


def test_a_valid_heartbeat_is_stored_and_answered_without_django(gpu1):
    done = call(json.dumps(heartbeat("gpu-1")).encode(), gpu1, chunks=3)
    assert done["handed"] == []
    start, body = done["sent"]
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert json.loads(body["body"]) == {
        "node": "gpu-1",
        "state": "Ready",
        "register": False,
        "desired": {"engines": [], "shards": []},
        "desired_digest": desired.digest({"engines": [], "shards": []}),
    }
    node = Node.objects.get(name="gpu-1")
    assert node.last_heartbeat_at is not None and node.cpu_utilization_percent == 12.5


@pytest.mark.parametrize(
    "case",
    ["other node", "wrong secret", "revoked", "not a heartbeat", "certificate", "no scheme"],
)
def test_what_it_cannot_store_goes_to_django_whole_and_unwritten(gpu1, make_node, case):
    make_node("gpu-2")
    payload, credential, scope = heartbeat("gpu-1"), gpu1, {}
    if case == "other node":
        payload = heartbeat("gpu-2")
    elif case == "wrong secret":
        credential = gpu1.rpartition(".")[0] + ".not-the-secret"
    elif case == "revoked":
        services.revoke_node("gpu-1", "test")
    elif case == "not a heartbeat":
        payload["cpu"]["utilization_percent"] = "high"
    elif case == "certificate":
        scope = {"extensions": {"tls": {"client_cert_chain": ["-----BEGIN CERTIFICATE-----"]}}}
    body = json.dumps(payload).encode()
    scheme = "Bearer" if case == "no scheme" else "Node"
    done = call(body, credential, chunks=2, scheme=scheme, **scope)
    assert done["handed"] == [body]
    assert done["sent"] == []
    assert set(Node.objects.values_list("last_heartbeat_at", flat=True)) == {None}


def test_a_body_over_the_agent_limit_goes_to_django_whole(gpu1, settings):
    settings.AGENT_MAX_PAYLOAD_BYTES = 2048
    payload = heartbeat("gpu-1", warnings=["x" * 3000])
    body = json.dumps(payload).encode()
    done = call(body, gpu1, chunks=4)
    assert done["handed"] == [body]
    assert Node.objects.get(name="gpu-1").last_heartbeat_at is None
