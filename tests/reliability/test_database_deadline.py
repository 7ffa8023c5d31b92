"""The client-side deadline on a database round trip: a read nobody will
answer (a hung server's socket, which the kernel keeps open) is ended by
the watchdog, and a round trip that finished in time is left alone.
tests/reliability/test_layout_faults.py freezes a real PostgreSQL."""

from __future__ import annotations

import socket
import time

from llmgw.database.deadline import watchdog


def test_a_read_past_its_deadline_ends_and_one_in_time_is_left_alone() -> None:
    hung, server = socket.socketpair()
    with hung, server:
        started = time.monotonic()
        with watchdog.bound(hung.fileno(), 0.5, "a test read"):
            # Nobody writes: without the watchdog this waits for ever.
            assert hung.recv(16) == b""
        assert 0.4 <= time.monotonic() - started < 5

    quick, peer = socket.socketpair()
    with quick, peer:
        with watchdog.bound(quick.fileno(), 0.3, "a quick read"):
            peer.send(b"ok")
            assert quick.recv(16) == b"ok"
        time.sleep(1.0)
        peer.send(b"still open")
        assert quick.recv(16) == b"still open"
