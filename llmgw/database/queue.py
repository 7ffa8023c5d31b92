"""Waiting for a pooled connection: shed load only when PostgreSQL has
stopped answering, not because it is busy.

A request waited for one of its process's pooled connections for at most
LLMGW_DB_POOL_TIMEOUT_S (10 s), then got a 503. That bound is right while
the database is down or hung: nothing will come back, and the client should
retry later. It is wrong under a burst: 500 API calls at once against two
web processes of 8 connections each had 331 answered 503 while every
connection was in use and answering, because a call at the back of the
queue waits longer than 10 s for its turn however healthy the database is.

So a request that has waited the pool's timeout keeps waiting, a short
round at a time, while this process's connections are still getting
answers (llmgw.database.base records each one), up to
LLMGW_DB_QUEUE_S; when no answer came in the last LIVELY_S, the database
is out and the request fails as before (a 503 with Retry-After).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from psycopg_pool import ConnectionPool, PoolTimeout

# An answer at least this recent means the database is serving: a busy
# process gets several a second. A request already waiting when the
# database hangs gives up within about this much of the last answer.
LIVELY_S = 2.0


class Answers:
    """When a round trip of this process last got its answer."""

    def __init__(self) -> None:
        self.last = float("-inf")

    def answered(self) -> None:
        # One float assigned: atomic, no lock needed for a freshness mark.
        self.last = time.monotonic()


answers = Answers()
_wrapping = threading.Lock()


class PatientGetconn:
    def __init__(self, pool: ConnectionPool, getconn: Callable[..., Any], queue_s: float) -> None:
        self.pool, self.getconn, self.queue_s = pool, getconn, queue_s

    def __call__(self, timeout: float | None = None) -> Any:
        wait = self.pool.timeout if timeout is None else timeout
        give_up = time.monotonic() + max(wait, self.queue_s)
        while True:
            try:
                return self.getconn(wait)
            except PoolTimeout:
                now = time.monotonic()
                if now >= give_up or now - answers.last > LIVELY_S:
                    raise
                wait = min(LIVELY_S, give_up - now)


def make_patient(pool: ConnectionPool, queue_s: float) -> None:
    """Have `pool` wait as above; once per pool, whichever thread asks first."""
    if isinstance(pool.getconn, PatientGetconn):
        return  # asked on every cursor: no lock once done
    with _wrapping:
        if not isinstance(pool.getconn, PatientGetconn):
            pool.getconn = PatientGetconn(pool, pool.getconn, queue_s)  # type: ignore[method-assign]  # on purpose: this pool's getconn waits
