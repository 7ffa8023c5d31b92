"""A revoked node's command stream: closed at once, and deaf and dumb until
then. A real uvicorn server and a real WebSocket client."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import pytest
from llmgw_agent.stream import stream_url
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from llmgw.inventory import commands, services
from llmgw.inventory.models import AgentCommand

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def open_stream(server: str, credential: str) -> Iterator[ClientConnection]:
    with connect(
        stream_url(server), additional_headers={"Authorization": f"Node {credential}"}
    ) as ws:
        time.sleep(0.3)  # let the consumer join its group and start polling
        yield ws


def closed_within(ws: ClientConnection, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        except ConnectionClosed:
            return True
        except TimeoutError:
            return False
    return False


def test_revoking_a_node_closes_its_stream_and_drops_its_late_results(asgi_server, make_node):
    node, credential = make_node("gpu-1")
    with open_stream(asgi_server, credential) as ws:
        command = commands.send(node, "ping")
        sent = json.loads(ws.recv(timeout=5))
        assert sent["id"] == command.pk
        started = time.monotonic()
        services.revoke_node("gpu-1", "test")
        # What the revoked socket sends now must not count, whether it gets
        # through before the close or not.
        with contextlib.suppress(ConnectionClosed):
            ws.send(json.dumps({"type": "result", "id": command.pk, "ok": True, "output": "late"}))
        assert closed_within(ws, 1.0 - (time.monotonic() - started)), "still open after 1 s"
    time.sleep(0.5)
    command.refresh_from_db()
    assert (command.state, command.output) == ("sent", "")


def test_a_rejoined_node_never_gets_the_old_sockets_commands(asgi_server, make_node):
    node, old_credential = make_node("gpu-1")
    with open_stream(asgi_server, old_credential) as old:
        services.revoke_node("gpu-1", "test")
        new_credential = services.join("gpu-1", services.add_node("gpu-1", "test"))
        command = commands.send(node, "ping")
        # The old socket's poll runs every second: give it two.
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            message = old.recv(timeout=2.5)
            pytest.fail(f"the revoked socket received {message}")
        command.refresh_from_db()
        assert command.state == "pending"
        with open_stream(asgi_server, new_credential) as new:
            assert json.loads(new.recv(timeout=5))["id"] == command.pk
    assert AgentCommand.objects.get(pk=command.pk).state == "sent"
