"""The client against a real HTTP server on 127.0.0.1 that fails, then recovers."""

from __future__ import annotations

import logging
import socket
import stat
import threading
from itertools import count
from pathlib import Path

import pytest
from llmgw_agent.client import (
    HEARTBEAT,
    JOIN,
    REGISTER,
    AgentClient,
    AuthError,
    Backoff,
    RejectedError,
    TransientError,
    send_latest,
    write_credential,
)

from tests.agent.conftest import ControlPlane

SECRET = "n1.s3cr3t-credential"


def test_backoff_doubles_to_a_cap_with_jitter() -> None:
    low = Backoff(base=1, cap=60, rng=lambda: 0.0)
    assert [low.next() for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    high = Backoff(base=1, cap=60, rng=lambda: 1.0)
    assert [high.next() for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    for _ in range(5000):  # far past where 2**n would overflow a float
        high.next()
    assert high.next() == 60
    high.reset()
    assert high.next() == 1


def test_default_backoff_waits_at_most_10_s() -> None:
    # An agent must be back within 15 s of the control plane recovering: the longest
    # wait, plus the attempt that failed just before the recovery, must fit in that.
    high = Backoff(rng=lambda: 1.0)
    delays = [high.next() for _ in range(40)]
    assert max(delays) == 10 and delays[:4] == [1, 2, 4, 8]
    low = Backoff(rng=lambda: 0.0)
    assert [low.next() for _ in range(40)][-1] == 5


def test_outage_then_recovery_sends_latest_state(control_plane: ControlPlane) -> None:
    # Two dropped connections, then two 503s, then the server is back.
    control_plane.script[HEARTBEAT] = ["drop", "drop", 503, 502]
    built = count(1)
    delays: list[float] = []

    class Recording(Backoff):
        def next(self) -> float:
            delays.append(super().next())
            return 0.01

    with AgentClient(control_plane.url, credential=SECRET) as client:
        answer = send_latest(
            client.heartbeat,
            lambda: {"schema": 1, "node": "n1", "seq": next(built)},
            backoff=Recording(base=1, cap=60, rng=lambda: 1.0),
            stop=threading.Event(),
        )
    assert answer == {"state": "Ready", "register": False, "node": "n1"}
    # One heartbeat arrived, and it is the state built at the fifth attempt, not a
    # replay of the first four.
    assert [r.body["seq"] for r in control_plane.ok(HEARTBEAT)] == [5]
    assert delays == [1, 2, 4, 8]


def test_unreachable_server_is_transient() -> None:
    with socket.socket() as sock:  # a port that was just free: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with AgentClient(f"http://127.0.0.1:{port}", credential=SECRET, timeout_s=2) as client:
        with pytest.raises(TransientError) as exc:
            client.heartbeat({"node": "n1"})
    assert SECRET not in str(exc.value)


def test_revoked_credential_is_logged_plainly_and_retried_slowly(
    control_plane: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    control_plane.script[HEARTBEAT] = [401, 403]
    reloads: list[int] = []
    waits: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0)
            return False

    with caplog.at_level(logging.DEBUG), AgentClient(control_plane.url, credential=SECRET) as c:
        answer = send_latest(
            c.heartbeat,
            lambda: {"node": "n1"},
            backoff=Backoff(),
            stop=Stop(),
            auth_retry_s=60,
            on_auth_error=lambda: reloads.append(1),
        )
    assert answer is not None
    assert waits == [60, 60] and len(reloads) == 2
    assert "credential refused" in caplog.text and "revoked" in caplog.text
    assert SECRET not in caplog.text and "s3cr3t" not in caplog.text


def test_rejected_payload_is_not_retried(control_plane: ControlPlane) -> None:
    control_plane.script[REGISTER] = [400]
    with AgentClient(control_plane.url, credential=SECRET) as client:
        with pytest.raises(RejectedError):
            client.register({"node": "n1"})
        assert send_latest(
            client.register, lambda: {"node": "n1"}, backoff=Backoff(), stop=threading.Event()
        ) == {"state": "Ready", "register": False, "node": "n1"}


def test_requests_carry_the_node_credential(control_plane: ControlPlane) -> None:
    with AgentClient(control_plane.url, credential=SECRET) as client:
        client.register({"schema": 1, "node": "n1"})
    assert control_plane.ok(REGISTER)[0].headers["Authorization"] == f"Node {SECRET}"
    with AgentClient(control_plane.url) as anonymous, pytest.raises(AuthError):
        anonymous.heartbeat({"node": "n1"})


def test_join_stores_credential_0600(control_plane: ControlPlane, tmp_path: Path) -> None:
    control_plane.script[JOIN] = [{"node": "n1", "credential": SECRET}]
    target = tmp_path / "var" / "lib" / "llmgw-agent" / "credential"
    with AgentClient(control_plane.url) as client:
        assert client.join("n1", "tok", target) == SECRET
        assert client.credential == SECRET
    received = control_plane.ok(JOIN)[0]
    assert received.body == {"schema": 1, "node": "n1", "token": "tok"}
    assert "Authorization" not in received.headers
    assert target.read_text().strip() == SECRET
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700


def test_credential_rewrite_narrows_a_loose_file(tmp_path: Path) -> None:
    target = tmp_path / "credential"
    target.write_text("old")
    target.chmod(0o644)
    write_credential(target, SECRET)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_join_answer_for_another_node_is_refused(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    control_plane.script[JOIN] = [{"node": "n2", "credential": "n2.x"}]
    with AgentClient(control_plane.url) as client, pytest.raises(RejectedError):
        client.join("n1", "tok", tmp_path / "credential")
    assert not (tmp_path / "credential").exists()
