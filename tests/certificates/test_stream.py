"""The command stream over mTLS: a real TLS WebSocket on loopback, opened with the
node's certificate, carries commands until the node is revoked."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from llmgw_agent.client import AgentClient
from llmgw_agent.collectors.registry import Roots
from llmgw_agent.stream import Stream

from llmgw.inventory import commands, services
from llmgw.inventory.models import AgentCommand, Node
from tests.certificates.conftest import Pki

pytestmark = pytest.mark.django_db(transaction=True)


def finished(command: AgentCommand, seconds: float = 15.0) -> AgentCommand:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        command.refresh_from_db()
        if command.state in ("done", "failed"):
            return command
        time.sleep(0.05)
    raise AssertionError(f"command {command.pk} still {command.state}")


@contextmanager
def streaming(client: AgentClient, url: str) -> Iterator[threading.Event]:
    stop = threading.Event()
    stream = Stream(url, lambda: client.credential, Roots(), stop, identity=client.stream_identity)
    thread = threading.Thread(target=stream.run_forever, daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(timeout=5)
        client.close()


def test_a_node_on_its_certificate_gets_commands_until_it_is_revoked(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    cert_file, key_file = pki.node_files("gpu-a", tmp_path / "a")
    client = AgentClient(tls_server, ca_file=pki.ca_file, cert_file=cert_file, key_file=key_file)
    node = Node.objects.get(name="gpu-a")
    with streaming(client, tls_server):
        done = finished(commands.send(node, "ping"))
        assert (done.state, done.output) == ("done", "pong")
        services.revoke_node("gpu-a", "test")
        time.sleep(2.5)  # two polls: the stream is closed and is not let in again
        late = commands.send(node, "ping")
        time.sleep(2.5)
        late.refresh_from_db()
        assert late.state == "pending"


def test_a_node_on_its_credential_opens_its_stream_over_https_with_ca_file(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    token = services.add_node("gpu-c", "test")
    client = AgentClient(tls_server, ca_file=pki.ca_file)
    client.join("gpu-c", token, tmp_path / "credential")
    with streaming(client, tls_server):
        done = finished(commands.send(Node.objects.get(name="gpu-c"), "ping"))
        assert (done.state, done.output) == ("done", "pong")
