"""One way in for a heartbeat: the lean path before Django stores it, and
DRF's HeartbeatView answers only what the lean path hands on. Each answer
names the code that gave it (X-Llmgw-Served-By), so a real agent's and a
simulated node's heartbeats are seen taking the lean path through a live
server; a wrong credential costs one decode and one round trip; and the
columns a heartbeat writes are one list (heartbeats.MEASURED). The
command stream reads with the same reader."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.asgi import get_asgi_application
from django.db.backends import utils
from llmgw_agent.client import HEARTBEAT
from llmgw_agent.config import parse_config
from llmgw_agent.main import run
from llmgw_agent.stream import stream_url
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from llmgw.inventory import commands, heartbeats, services
from llmgw.inventory.api import agent_request
from llmgw.inventory.api.heartbeat_asgi import PATH
from llmgw.inventory.models import Node
from llmgw.simulator.fleet import make_fleet
from llmgw.simulator.swarm import Member, Swarm
from tests.agent.helpers import host_roots
from tests.inventory.lean_path import post
from tests.payloads import heartbeat, registration
from tests.servers import ServerThread

pytestmark = pytest.mark.django_db(transaction=True)
SERVED_BY = agent_request.SERVED_BY.lower()


class Recording:
    """An HTTP proxy in front of the control plane that records, for each
    request, the method, path, status and the code that answered it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.seen: list[tuple[str, str, int, str | None]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # the agent's command stream: not this test's
            await receive()
            await send({"type": "websocket.close", "code": 1013})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        skip = {b"host", b"content-length", b"connection", b"accept-encoding"}
        headers = [(k, v) for k, v in scope["headers"] if k not in skip]
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.request(
                scope["method"],
                self.target + scope["path"],
                content=body,
                headers=headers,
                params=scope["query_string"].decode(),
            )
        self.seen.append(
            (scope["method"], scope["path"], answer.status_code, answer.headers.get(SERVED_BY))
        )
        keep = [
            (k.encode(), v.encode())
            for k, v in answer.headers.items()
            if k not in ("content-length", "transfer-encoding", "content-encoding", "connection")
        ]
        length = (b"content-length", str(len(answer.content)).encode())
        await send(
            {
                "type": "http.response.start",
                "status": answer.status_code,
                "headers": keep + [length],
            }
        )
        await send({"type": "http.response.body", "body": answer.content})

    def heartbeats(self) -> set[tuple[int, str | None]]:
        return {(status, by) for method, path, status, by in self.seen if path == HEARTBEAT}


def wait_for(what: str, check: Any, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_real_agent_and_the_simulator_heartbeat_through_the_lean_path(
    asgi_server: str, make_node: Any, tmp_path: Path
) -> None:
    recording = Recording(asgi_server)
    proxy = ServerThread(recording).start()
    try:
        node, credential = make_node("gpu-1")
        (tmp_path / "credential").write_text(f"{credential}\n")
        config = parse_config(
            f"server_urls: [{proxy.url}]\nnode: gpu-1\ncredential_file: credential\n"
            "heartbeat_interval_s: 1\n",
            base=tmp_path,
        )
        stop = threading.Event()
        agent = threading.Thread(
            target=run, kwargs={"config": config, "roots": host_roots(), "stop": stop}, daemon=True
        )
        agent.start()
        try:

            def beaten() -> bool:
                node.refresh_from_db()
                return bool(node.registered_at and node.last_heartbeat_at)

            wait_for("the agent's heartbeat", beaten)
        finally:
            stop.set()
            agent.join(timeout=15)
        assert recording.heartbeats() == {(200, "lean")}

        recording.seen.clear()
        [sim] = make_fleet(1, prefix="one")
        _, sim_credential = make_node(sim.name)

        async def simulate() -> None:
            async with Swarm(
                [proxy.url], [Member(sim, sim_credential)], 1.0, streams=False
            ) as swarm:
                await swarm.run(once=True)
                assert swarm.stats.failed == 0

        asyncio.run(simulate())
        assert Node.objects.get(name=sim.name).last_heartbeat_at is not None
        assert recording.heartbeats() == {(200, "lean")}
    finally:
        proxy.stop()


class Counted:
    """Statements sent to PostgreSQL by any thread, and bodies decoded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements = 0
        self.decodes = 0
        execute = utils.CursorWrapper.execute

        def counting_execute(cursor: Any, *args: Any, **kwargs: Any) -> Any:
            self.statements += 1
            return execute(cursor, *args, **kwargs)

        monkeypatch.setattr(utils.CursorWrapper, "execute", counting_execute)
        for name in ("decode", "read"):
            original = getattr(agent_request, name)

            def counting(*args: Any, original: Any = original) -> Any:
                self.decodes += 1
                return original(*args)

            monkeypatch.setattr(agent_request, name, counting)


def beat(credential: str, payload: dict[str, Any], **scope: Any) -> dict[str, Any]:
    headers = [
        (b"authorization", f"Node {credential}".encode()),
        (b"content-type", b"application/json"),
    ]
    body = json.dumps(payload).encode()
    done = post(PATH, body, headers, django=get_asgi_application(), **scope)
    start, answer = done["sent"]
    sent = {k.lower(): v for k, v in start["headers"]}
    return {
        "status": start["status"],
        "by": sent.get(SERVED_BY.encode()),
        "body": json.loads(answer["body"]),
        "headers": sent,
    }


@pytest.mark.parametrize("named", ["its own node", "another node"])
def test_a_wrong_credential_costs_one_decode_and_one_round_trip(
    make_node: Any, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    node, credential = make_node("gpu-1")
    make_node("gpu-2")
    services.register(node, registration("gpu-1"), None)
    wrong = "gpu-1.not-the-secret"
    counted = Counted(monkeypatch)
    answer = beat(wrong, heartbeat("gpu-1" if named == "its own node" else "gpu-2"))
    del answer["headers"]
    assert answer == {
        "status": 401,
        "by": b"django",
        "body": {"detail": "unknown or revoked node credential"},
    }
    assert (counted.decodes, counted.statements) == (1, 1)
    assert Node.objects.get(name="gpu-1").last_heartbeat_at is None


def test_a_valid_heartbeat_is_answered_by_the_lean_path_and_a_refusal_by_django(
    make_node: Any,
) -> None:
    node, credential = make_node("gpu-1")
    services.register(node, registration("gpu-1"), None)
    stored = beat(credential, heartbeat("gpu-1"))
    assert (stored["status"], stored["by"]) == (200, b"lean")
    bad = heartbeat("gpu-1")
    bad["cpu"]["utilization_percent"] = "high"
    refused = beat(credential, bad)
    assert (refused["status"], refused["by"]) == (400, b"django")
    assert "cpu.utilization_percent" in refused["body"]["errors"]


def test_the_lean_answer_carries_the_security_headers_django_makes_from_its_settings(
    make_node: Any, settings: Any
) -> None:
    settings.SECURE_HSTS_SECONDS = 3600
    settings.X_FRAME_OPTIONS = "SAMEORIGIN"
    settings.SECURE_REFERRER_POLICY = "no-referrer"
    node, credential = make_node("gpu-1")
    services.register(node, registration("gpu-1"), None)
    stored = beat(credential, heartbeat("gpu-1"), scheme="https")
    bad = heartbeat("gpu-1")
    bad["cpu"]["utilization_percent"] = "high"
    refused = beat(credential, bad, scheme="https")
    assert (stored["by"], refused["by"]) == (b"lean", b"django")
    security = {
        b"strict-transport-security",
        b"x-frame-options",
        b"x-content-type-options",
        b"referrer-policy",
        b"cross-origin-opener-policy",
    }
    lean = {k: v for k, v in stored["headers"].items() if k in security}
    assert lean == {k: v for k, v in refused["headers"].items() if k in security}
    assert lean[b"strict-transport-security"] == b"max-age=3600"
    assert lean[b"x-frame-options"] == b"SAMEORIGIN"
    assert lean[b"referrer-policy"] == b"no-referrer"


def test_a_column_added_to_the_measured_list_is_stored(
    make_node: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, credential = make_node("gpu-1")
    services.register(node, registration("gpu-1"), None)
    extra = heartbeats.Measured(
        "agent_version", lambda data, digests: "sent_at" in data, lambda data, now: data["sent_at"]
    )
    monkeypatch.setattr(heartbeats, "MEASURED", (*heartbeats.MEASURED, extra))
    payload = heartbeat("gpu-1", sent_at="2026-12-06T01:00:00Z")
    assert beat(credential, payload)["status"] == 200
    node.refresh_from_db()
    assert node.agent_version == "2026-12-06T01:00:00Z"
    # A heartbeat that does not bring it leaves it as stored.
    assert beat(credential, heartbeat("gpu-1"))["status"] == 200
    node.refresh_from_db()
    assert node.agent_version == "2026-12-06T01:00:00Z"


@pytest.mark.parametrize(
    "message",
    [
        '{"type": "result", "id": %d, "ok": true, "output": "po\\u0000ng"}',
        '{"type": "result", "id": %d, "ok": "yes"}',
        "{not json %d",
    ],
)
def test_the_stream_reads_a_result_as_the_api_reads_a_body(
    asgi_server: str, make_node: Any, message: str
) -> None:
    """A NUL, a field of the wrong type or no JSON at all: refused by the
    same reader as an HTTP body, the stream is closed with 4400, and the
    command waits on as it was."""
    node, credential = make_node("gpu-1")
    command = commands.send(node, "ping")
    headers = {"Authorization": f"Node {credential}"}
    with connect(stream_url(asgi_server), additional_headers=headers, open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["id"] == command.pk
        ws.send(message % command.pk)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400
    command.refresh_from_db()
    assert command.state == "sent"
