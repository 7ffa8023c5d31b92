"""Several control-plane URLs, and how soon an agent is back after an outage: real
HTTP servers on 127.0.0.1, one of them stopped and started again on its port."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from llmgw_agent.client import HEARTBEAT, REGISTER, AgentClient, Backoff, send_latest
from llmgw_agent.config import parse_config
from llmgw_agent.main import run

from tests.agent.conftest import ControlPlane
from tests.agent.helpers import StandIn, dead_url, host_roots

CREDENTIAL = "n1.secret"


class Recording(Backoff):
    """The real backoff's delays, recorded; waits 10 ms so the test does not sleep."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def next(self) -> float:
        self.delays.append(super().next())
        return 0.01


def heartbeat(client: AgentClient, backoff: Backoff, attempts: int | None = None) -> object:
    return send_latest(
        client.heartbeat,
        lambda: {"schema": 1, "node": "n1"},
        backoff=backoff,
        stop=threading.Event(),
        max_attempts=attempts,
    )


def test_fails_over_at_once_and_sticks_to_the_url_that_works(control_plane: ControlPlane) -> None:
    backoff = Recording()
    with StandIn(status=503) as unavailable:
        urls = [dead_url(), unavailable.url, control_plane.url]
        with AgentClient(urls, credential=CREDENTIAL) as client:
            assert heartbeat(client, backoff) is not None
            # Nothing listening, then a 503: both passed over in the same attempt.
            assert backoff.delays == []
            assert client.server_url == control_plane.url
            assert heartbeat(client, backoff) is not None
        # The second heartbeat went straight to the URL that worked.
        assert len(unavailable.posts(HEARTBEAT)) == 1
    assert len(control_plane.ok(HEARTBEAT)) == 2


def test_a_url_that_never_answers_is_passed_over_after_the_timeout(
    control_plane: ControlPlane,
) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with AgentClient([url, control_plane.url], credential=CREDENTIAL, timeout_s=0.5) as c:
            backoff = Recording()
            assert heartbeat(c, backoff) is not None
            assert backoff.delays == [] and c.server_url == control_plane.url


def test_backoff_only_once_every_url_failed(caplog: pytest.LogCaptureFixture) -> None:
    backoff = Recording()
    dead = dead_url()
    with StandIn(status=502) as failing:
        with AgentClient([failing.url, dead], credential=CREDENTIAL) as client:
            assert heartbeat(client, backoff, attempts=3) is None
            # One delay per round of both URLs, each URL tried once a round.
            assert len(backoff.delays) == 3
            assert len(failing.posts(HEARTBEAT)) == 3
            # A round starts again where the last one did.
            assert client.server_url == failing.url
    assert failing.url in caplog.text and dead in caplog.text
    assert CREDENTIAL not in caplog.text


def test_too_many_requests_is_not_a_failover(control_plane: ControlPlane) -> None:
    # 429 is the control plane asking this node to slow down, whichever process says it.
    backoff = Recording()
    with StandIn(status=429) as busy:
        with AgentClient([busy.url, control_plane.url], credential=CREDENTIAL) as client:
            assert heartbeat(client, backoff, attempts=1) is None
            assert client.server_url == busy.url and len(backoff.delays) == 1
    assert control_plane.ok(HEARTBEAT) == []


class Outage(StandIn):
    """503 to everything (a web process whose database is down) until the first request
    at or after `recover_at`; that one still fails, and from then on all is well. This is
    the worst moment to recover: the agent has just failed and starts its longest wait."""

    def __init__(self) -> None:
        super().__init__(status=503)
        self.recover_at = float("inf")
        self.recovered_at: float | None = None

    def answer_for(self, path: str) -> int:
        if self.recovered_at is None and time.monotonic() >= self.recover_at:
            self.recovered_at = time.monotonic()
            return 503
        return 503 if self.recovered_at is None else 200


@pytest.mark.slow
def test_back_within_15_s_of_the_control_plane_recovering(tmp_path: Path) -> None:
    (tmp_path / "credential").write_text(f"{CREDENTIAL}\n")
    server = Outage()
    # The shipped heartbeat interval: the retry delays must not grow with it.
    config = parse_config(
        f"server_url: {server.url}\nnode: n1\ncredential_file: credential\n"
        "heartbeat_interval_s: 10\n",
        base=tmp_path,
    )
    stop = threading.Event()
    agent = threading.Thread(
        target=run, kwargs={"config": config, "roots": host_roots(), "stop": stop}
    )
    started = time.monotonic()
    # The agent starts into the outage: nothing listens on the port at first.
    agent.start()
    try:
        time.sleep(6)
        # The web process is back on its port, but answers 503 until the database is.
        server.start()
        # Past 16 s of failures, an agent whose delays double would wait 16 s or more.
        server.recover_at = started + 17
        deadline = started + 40
        while server.recovered_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.recovered_at is not None, "the agent stopped trying"
        back_by = server.recovered_at + 15
        while not server.posts(HEARTBEAT, 200) and time.monotonic() < back_by:
            time.sleep(0.05)
        beats = server.posts(HEARTBEAT, 200)
        assert beats, f"no heartbeat within 15 s of recovery: {server.seen}"
        assert beats[0] - server.recovered_at <= 15
        # The agent sends its state as it is now, once: one register, one heartbeat.
        assert len(server.posts(REGISTER, 200)) == 1
    finally:
        stop.set()
        agent.join(timeout=15)
        server.stop()
    assert not agent.is_alive()
