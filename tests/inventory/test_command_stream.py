"""The command stream end to end: a real ASGI server, the agent's real
stream client, commands queued in the database."""

from __future__ import annotations

import threading
import time

import pytest
from llmgw_agent.collectors.registry import Roots
from llmgw_agent.stream import Stream, stream_url
from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import connect

from llmgw.inventory import commands
from llmgw.inventory.models import AgentCommand

pytestmark = pytest.mark.django_db(transaction=True)


def wait_finished(command: AgentCommand, seconds: float = 10.0) -> AgentCommand:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        command.refresh_from_db()
        if command.state in ("done", "failed"):
            return command
        time.sleep(0.05)
    raise AssertionError(f"command {command.pk} still {command.state}")


@pytest.fixture
def stream(asgi_server, make_node):
    node, credential = make_node("gpu-1")
    stop = threading.Event()
    agent = Stream(asgi_server, lambda: credential, Roots(), stop)
    thread = threading.Thread(target=agent.run_forever, daemon=True)
    thread.start()
    yield node
    stop.set()
    thread.join(timeout=5)


def test_a_command_reaches_the_agent_and_its_answer_comes_back(stream):
    time.sleep(0.5)  # let the stream open
    command = commands.send(stream, "ping")
    done = wait_finished(command)
    assert (done.state, done.output) == ("done", "pong")
    # Carried within the stream's poll interval, whatever the channel layer.
    assert (done.sent_at - done.created_at).total_seconds() < 2


def test_an_unknown_command_fails_with_the_agents_words(stream):
    done = wait_finished(commands.send(stream, "format-disk"))
    assert done.state == "failed"
    assert "does not answer 'format-disk'" in done.error


def test_a_command_queued_before_the_agent_connects_is_delivered(asgi_server, make_node):
    node, credential = make_node("late")
    command = commands.send(node, "ping")
    stop = threading.Event()
    agent = Stream(asgi_server, lambda: credential, Roots(), stop)
    threading.Thread(target=agent.run_forever, daemon=True).start()
    try:
        assert wait_finished(command).output == "pong"
    finally:
        stop.set()


def test_a_bad_credential_cannot_open_the_stream(asgi_server, make_node):
    _, credential = make_node("gpu-1")
    with pytest.raises((InvalidStatus, WebSocketException, OSError)):
        with connect(
            stream_url(asgi_server), additional_headers={"Authorization": f"Node {credential}x"}
        ) as ws:
            ws.recv(timeout=3)


def test_a_node_cannot_answer_another_nodes_command(make_node):
    a, _ = make_node("node-a")
    b, _ = make_node("node-b")
    command = commands.send(a, "ping")
    assert commands.claim(a.pk) == [command]
    assert commands.claim(a.pk) == []  # handed out once
    assert commands.finish(b.pk, {"id": command.pk, "ok": True, "output": "forged"}) is None
    command.refresh_from_db()
    assert command.state == "sent"


def test_unanswered_commands_expire_saying_so(make_node):
    from datetime import timedelta

    from django.utils import timezone

    node, _ = make_node("gpu-1")
    command = commands.send(node, "ping", timeout_s=5)
    assert commands.expire(timezone.now() + timedelta(seconds=6)) == 1
    command.refresh_from_db()
    assert command.state == "failed" and "no answer within 5 s" in command.error
