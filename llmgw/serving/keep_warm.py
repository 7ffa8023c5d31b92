"""A web process's warm fleet, read when the process starts and looked at
every minute after, rather than on the first placement or explain.

Cold, a process reads the whole fleet before it can place: 6 to 8 s at
5,000 nodes under load, paid by the first operator to place or explain
after a deploy, with every other placer of the process waiting behind
them. And a process that has not looked for IDLE_S reads it whole again,
as the log may have been pruned meanwhile; a look a minute keeps each
one small (what changed in that minute) and the process never idle.

Started by the ASGI lifespan (uvicorn sends it; servers that do not, and
tests calling the application, read the fleet when first asked, as
before). SQLite has no log to follow: nothing is kept there.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import connection, connections

from llmgw.serving import warm

log = logging.getLogger("llmgw.placement")

KEEP_EVERY_S = 60.0
# After the process starts: its agents reconnect in the first seconds.
FIRST_AFTER_S = 10.0


def _keep(stop: threading.Event) -> None:
    if stop.wait(FIRST_AFTER_S):
        return
    while True:
        try:
            warm.FLEET.look()
        except Exception:  # the database away: placement reads it when asked
            log.warning("warm fleet: could not look at the log; placement will", exc_info=True)
        finally:
            # The thread's own connection, not kept open between looks.
            connection.close()
        if stop.wait(KEEP_EVERY_S):
            return


def start() -> threading.Event | None:
    """Keep this process's fleet warm until the event returned is set."""
    if connections["default"].vendor != "postgresql":
        return None
    stop = threading.Event()
    threading.Thread(target=_keep, args=(stop,), name="keep-warm-fleet", daemon=True).start()
    return stop


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI lifespan protocol: keep warm from startup to shutdown."""
    stop = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            stop = start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if stop is not None:
                stop.set()
            await send({"type": "lifespan.shutdown.complete"})
            return
