"""How soon an agent is back after an outage: a real HTTP server on 127.0.0.1, stopped
and started again on its port."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from llmgw_agent.client import HEARTBEAT, REGISTER
from llmgw_agent.config import parse_config
from llmgw_agent.main import run

from tests.agent.helpers import StandIn, host_roots

CREDENTIAL = "n1.secret"


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
