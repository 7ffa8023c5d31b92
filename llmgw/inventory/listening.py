"""A web process says, every readiness.TICK_S, that it can hear its fleet
(llmgw.inventory.readiness explains what that record is for).

Started by the ASGI lifespan, as the warm fleet's keeper is, so that it
runs exactly where heartbeats come in: a web process killed, or one whose
database does not answer, stops writing, and its silence is the record of
the time the control plane could not hear.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from llmgw.database import own
from llmgw.inventory import coalesce, readiness

log = logging.getLogger("llmgw.inventory")

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _listen(stop: threading.Event) -> None:
    # A connection of its own: API requests queued for a pool must not
    # hold up the record that the fleet can be heard (a late write only
    # gives every node one more grace, but it is the outage the record is
    # meant to tell apart).
    own.use("hearing", 1)()
    was_behind = 0.0
    ear = Ear()
    while not stop.is_set():
        # Asked before the write's `now`: a loop that does not answer
        # within BEHIND_S is itself that far behind.
        behind = coalesce.behind_s(timezone.now(), readiness.BEHIND_S)
        try:
            ear.tick(timezone.now(), behind)
        except Exception as exc:  # the database away: that is what the gap records
            log.info("could not record that the fleet can be heard: %s", exc)
            connection.close()
        late = behind >= readiness.BEHIND_S
        if late and not was_behind:
            log.warning(
                "heartbeats wait %.0f s to be answered here (%.0f s or more): every node's "
                "grace starts again until they are answered in time",
                behind,
                readiness.BEHIND_S,
            )
        elif was_behind and not late:
            log.warning(
                "heartbeats are answered in time again (at worst %.0f s behind meanwhile); "
                "every node has its full grace from now",
                was_behind,
            )
        was_behind = max(was_behind, behind) if late else 0.0
        if stop.wait(readiness.TICK_S):
            break
    connection.close()


class Ear:
    """One web process's writes of the record, a tick at a time."""

    def __init__(self) -> None:
        # Until the first write: this process was not hearing before it.
        self.started = True
        # The return this process began (its start, or a gap it found):
        # until the fleet is back, each write is a new stretch.
        self.returning: readiness.Return | None = None

    def tick(self, now: datetime, behind: float) -> None:
        if self.returning is not None and _back(self.returning, now):
            self.returning = None
        hearing = readiness.heard(now, behind, self.started, self.returning is not None)
        self.started = False
        if hearing.began and self.returning is None and hearing.since is not None:
            self.returning = readiness.Return(hearing.since)


def _back(ret: readiness.Return, now: datetime) -> bool:
    """Whether the fleet is back from that return (logged)."""
    unheard, total, back = readiness.returned(ret, now)
    if back and total:
        took = (now - ret.began).total_seconds()
        if unheard:
            log.warning(
                "%d of %d nodes heard in the %.0f s since the control plane could hear again; "
                "the %d others have a grace from now",
                total - unheard,
                total,
                took,
                unheard,
            )
        else:
            log.info("every node heard again %.0f s after the control plane could", took)
    return back


def start() -> threading.Event:
    """Record hearing until the event returned is set."""
    stop = threading.Event()
    threading.Thread(target=_listen, args=(stop,), name="hearing", daemon=True).start()
    return stop


def lifespan(inner: Asgi) -> Asgi:
    """The ASGI lifespan `inner`, with hearing recorded from startup to
    shutdown."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        stop: threading.Event | None = None

        async def received() -> Any:
            nonlocal stop
            message = await receive()
            if message["type"] == "lifespan.startup" and stop is None:
                stop = start()
            elif message["type"] == "lifespan.shutdown" and stop is not None:
                stop.set()
            return message

        await inner(scope, received, send)

    return app
