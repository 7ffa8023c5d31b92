"""A client-side deadline on each round trip to PostgreSQL.

A PostgreSQL that hangs (SIGSTOP, a frozen VM, a storage stall) keeps its
TCP connections open: the kernel still acknowledges every packet, so
neither keepalives nor TCP_USER_TIMEOUT fire, and the server's own
statement_timeout cannot fire in a stopped process. A request then waited
on its pooled connection for as long as the hang lasted (44 s in a test),
and nodes whose heartbeats were held that long were taken for silent.

One watchdog thread per process watches the round trips in flight; when
one passes its deadline it shuts the connection's socket down, psycopg's
wait sees the end of the stream and raises OperationalError, which the
web answers 503 with Retry-After (llmgw.outage) and a worker's task fails
and runs again on its next tick. The broken connection is dropped by the
pool, not reused.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

log = logging.getLogger("llmgw.database")

# How often the watchdog looks: a deadline is met within this much.
TICK_S = 0.25


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[float, int, str]] = {}
        self._tokens = itertools.count()
        self._pid: int | None = None

    @contextlib.contextmanager
    def bound(self, fileno: int, seconds: float, what: str) -> Iterator[None]:
        """Shut `fileno` down if the block is still running after `seconds`."""
        token = next(self._tokens)
        with self._lock:
            self._start()
            self._armed[token] = (time.monotonic() + seconds, fileno, what)
        try:
            yield
        finally:
            # Under the lock: once disarmed, the watchdog never touches this
            # socket again, so a descriptor closed and reused later is safe.
            with self._lock:
                self._armed.pop(token, None)

    def _start(self) -> None:
        # Started on first use and again in a forked child (Celery's pool),
        # where the parent's thread does not exist.
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        threading.Thread(target=self._watch, name="db-deadline", daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            with self._lock:
                for token, (deadline, fileno, what) in list(self._armed.items()):
                    if now >= deadline:
                        del self._armed[token]
                        _shut_down(fileno, what)


def _shut_down(fileno: int, what: str) -> None:
    log.warning("database did not answer %s in time: closing its connection", what)
    try:
        # A duplicate descriptor: shutting it down ends the connection for
        # the one psycopg holds, and closing it leaves psycopg's open.
        with socket.socket(fileno=os.dup(fileno)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError as exc:
        log.warning("could not shut the database connection down: %s", exc)


watchdog = Watchdog()
