"""Joins and registrations before Django (agent_asgi, by way of
heartbeats_first): what that path serves never reaches Django and is
answered as JoinView and RegisterView answer, and what it does not is
handed to Django with its body intact and nothing written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llmgw_agent.protocol import SCHEMA

from llmgw.inventory import services
from llmgw.inventory.api.agent_asgi import JOIN, REGISTER
from llmgw.inventory.models import AuditEvent, Gpu, Node
from tests.inventory.lean_path import post
from tests.payloads import registration

pytestmark = pytest.mark.django_db(transaction=True)


def call(
    path: str, body: bytes, credential: str = "", chunks: int = 1, **scope: Any
) -> dict[str, Any]:
    headers = [(b"content-type", b"application/json")]
    if credential:
        headers.append((b"authorization", credential.encode()))
    return post(path, body, headers, chunks, client=("10.1.2.3", 40000), **scope)


def answered(done: dict[str, Any]) -> tuple[int, Any]:
    assert done["handed"] == []
    start, body = done["sent"]
    assert dict(start["headers"])[b"content-type"] == b"application/json"
    return start["status"], json.loads(body["body"])


def join_body(name: str, token: str) -> bytes:
    return json.dumps({"schema": SCHEMA, "node": name, "token": token}).encode()


def test_a_join_is_answered_with_the_credential_without_django():
    token = services.add_node("gpu-1", "test")
    status, answer = answered(call(JOIN, join_body("gpu-1", token), chunks=3))
    assert status == 200 and answer["node"] == "gpu-1"
    assert services.authenticate(answer["credential"]).name == "gpu-1"
    assert AuditEvent.objects.filter(node_name="gpu-1", action="join").count() == 1


def test_a_refused_join_is_answered_and_recorded_once_as_the_view_does(client):
    services.add_node("gpu-1", "test")
    status, answer = answered(call(JOIN, join_body("gpu-1", "not-the-token")))
    view = client.post(
        "/api/agent/v1/join", join_body("gpu-1", "not-the-token"), content_type="application/json"
    )
    assert status == view.status_code == 403
    assert answer == view.json()
    assert AuditEvent.objects.filter(node_name="gpu-1", action="join-refused").count() == 2
    assert Node.objects.get(name="gpu-1").credential_hash == ""


@pytest.mark.parametrize("case", ["no token", "a number for a token", "a NUL", "not an object"])
def test_a_join_the_view_refuses_goes_to_django_whole_and_unwritten(case):
    token = services.add_node("gpu-1", "test")
    payload: Any = {"schema": SCHEMA, "node": "gpu-1", "token": token}
    if case == "no token":
        del payload["token"]
    elif case == "a number for a token":
        payload["token"] = 7
    elif case == "a NUL":
        payload["node"] = "gpu-1\x00"
    else:
        payload = [payload]
    body = json.dumps(payload).encode()
    done = call(JOIN, body, chunks=2)
    assert done["handed"] == [body] and done["sent"] == []
    assert Node.objects.get(name="gpu-1").credential_hash == ""
    assert not AuditEvent.objects.filter(node_name="gpu-1", action__startswith="join").exists()


def test_a_registration_is_stored_and_answered_as_the_view_answers(make_node, client):
    _, credential = make_node("gpu-1")
    status, answer = answered(
        call(REGISTER, json.dumps(registration("gpu-1")).encode(), f"Node {credential}", 3)
    )
    _, other = make_node("gpu-2")
    view = client.post(
        "/api/agent/v1/register",
        json.dumps(registration("gpu-2")).encode(),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Node {other}",
    )
    assert status == view.status_code == 200
    assert answer == {**view.json(), "node": "gpu-1"}
    node = Node.objects.get(name="gpu-1")
    assert node.registered_at is not None and node.address == "10.1.2.3"
    assert Gpu.objects.filter(node=node).count() == Gpu.objects.filter(node__name="gpu-2").count()


@pytest.mark.parametrize(
    "case",
    ["other node", "wrong secret", "revoked", "invalid", "certificate", "no scheme", "too large"],
)
def test_a_registration_it_cannot_serve_goes_to_django_whole_and_unwritten(
    make_node, settings, case
):
    _, credential = make_node("gpu-1")
    make_node("gpu-2")
    payload, scope, header = registration("gpu-1"), {}, f"Node {credential}"
    if case == "other node":
        payload = registration("gpu-2")
    elif case == "wrong secret":
        header = f"Node {credential.rpartition('.')[0]}.not-the-secret"
    elif case == "revoked":
        services.revoke_node("gpu-1", "test")
    elif case == "invalid":
        payload["heartbeat_interval_s"] = "often"
    elif case == "certificate":
        scope = {"extensions": {"tls": {"client_cert_chain": ["-----BEGIN CERTIFICATE-----"]}}}
    elif case == "no scheme":
        header = f"Bearer {credential}"
    else:
        settings.AGENT_MAX_PAYLOAD_BYTES = 256
    body = json.dumps(payload).encode()
    done = call(REGISTER, body, header, chunks=2, **scope)
    assert done["handed"] == [body] and done["sent"] == []
    assert set(Node.objects.values_list("registered_at", flat=True)) == {None}
    assert not Gpu.objects.exists()
