"""An agent given several control-plane URLs, against the real control plane under
uvicorn: it passes over a URL where nothing listens and one that answers 503, its
heartbeats land, and its command stream opens to the URL that works."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from llmgw_agent.client import HEARTBEAT, REGISTER
from llmgw_agent.config import parse_config
from llmgw_agent.main import run

from llmgw.inventory import commands
from llmgw.inventory.models import AgentCommand
from tests.agent.helpers import StandIn, dead_url, host_roots

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(what: str, check, seconds: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_agent_fails_over_to_the_control_plane_that_answers(
    asgi_server: str, make_node, tmp_path: Path
) -> None:
    node, credential = make_node("gpu-1")
    (tmp_path / "credential").write_text(f"{credential}\n")
    with StandIn(status=503) as unavailable:
        config = parse_config(
            f"server_urls: [{dead_url()}, {unavailable.url}, {asgi_server}]\n"
            "node: gpu-1\ncredential_file: credential\nheartbeat_interval_s: 1\n",
            base=tmp_path,
        )
        stop = threading.Event()
        agent = threading.Thread(
            target=run,
            kwargs={"config": config, "roots": host_roots(), "stop": stop},
            daemon=True,
        )
        agent.start()
        try:

            def heartbeat_at() -> object:
                node.refresh_from_db()
                return node.registered_at and node.last_heartbeat_at

            first = wait_for("a heartbeat through the third URL", heartbeat_at)
            wait_for("the next heartbeat", lambda: heartbeat_at() != first)
            # The 503 was met once, while registering; the agent then kept to the URL
            # that answered.
            assert len(unavailable.posts(REGISTER)) == 1
            assert unavailable.posts(HEARTBEAT) == []

            command = commands.send(node, "ping")
            done = wait_for(
                "the command stream to answer",
                lambda: AgentCommand.objects.filter(pk=command.pk, state="done").first(),
            )
            assert done.output == "pong"
        finally:
            stop.set()
            agent.join(timeout=15)
    assert not agent.is_alive()
