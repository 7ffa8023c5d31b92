"""A web process's warm fleet, kept warm by a thread of its own rather than
read whole by the first placement or explain after a deploy.

Cold, a process reads the whole fleet before it can place: 5 to 8 s at
5,000 nodes under load, paid by the first operator to place or explain,
with every other placer of the process waiting behind them. And a process
that has not looked for warm.IDLE_S reads it whole again, as the log may
have been pruned meanwhile; a look every KEEP_EVERY_S keeps each one
small (what changed since) and the process never idle. When it reads the
fleet whole is WarmFleet.keep's to decide: not while the fleet keeps
changing whole, as it does while it joins.

Started by the ASGI lifespan (uvicorn sends it; servers that do not, and
tests calling the application, read the fleet when first asked, as
before).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import connection

from llmgw import gc_pauses
from llmgw.serving import warm, warm_sql

log = logging.getLogger("llmgw.placement")

KEEP_EVERY_S = 30.0
# After the process starts: its agents reconnect in the first seconds.
FIRST_AFTER_S = 10.0


def _keep(stop: threading.Event) -> None:
    if stop.wait(FIRST_AFTER_S):
        return
    while True:
        try:
            keep(warm.FLEET)
        except Exception:  # the database away: placement reads it when asked
            log.warning("warm fleet: could not look at the log; placement will", exc_info=True)
        finally:
            # The thread's own connection goes back between looks.
            connection.close()
        if stop.wait(KEEP_EVERY_S):
            return


def start() -> threading.Event | None:
    """Keep this process's fleet warm until the event returned is set."""
    stop = threading.Event()
    threading.Thread(target=_keep, args=(stop,), name="keep-warm-fleet", daemon=True).start()
    return stop


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI lifespan protocol: keep warm from startup to shutdown."""
    stop = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            # What the process loads at startup is loaded: settled out of
            # the collector's way, and its pauses watched (llmgw.gc_pauses).
            gc_pauses.settle()
            gc_pauses.watch()
            stop = start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if stop is not None:
                stop.set()
            await send({"type": "lifespan.shutdown.complete"})
            return


def keep(fleet: warm.WarmFleet) -> None:
    """Keep the index warm from a thread of the process's own
    (serving.keep_warm), outside any transaction, so that the first
    placement or explain after a deploy does not read the fleet whole
    while every other placer of the process waits.

    Warm, it looks as a placement would, but a change of the whole fleet
    (a fabric mapped, a hold, a budget) drops the index rather than
    reading 5,000 nodes in the background. Cold, it reads the fleet
    only once the log has shown no such change for a whole interval:
    while a fleet joins, its fabrics are mapped again and again, and a
    whole read at each look (7-11 s of CPU under load) starved the
    joining nodes' heartbeats until they lapsed."""
    if connection.in_atomic_block:
        return
    with fleet.lock:
        quiet = fleet.quiet_from
        fleet.quiet_from = None
        if fleet.inventory is None and quiet and not warm_sql.whole_change_since(quiet):
            fleet.current()
            return
        if fleet.inventory is not None and fleet.current(whole=False) is not None:
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_snapshot()::text")
            fleet.quiet_from = cursor.fetchone()[0]
