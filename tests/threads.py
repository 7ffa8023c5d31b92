"""A call on a thread of its own, as a server's request thread makes it,
and the pooled connections other threads hold."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any


def in_own_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `fn` on a new thread and return what it returns (or raise what it
    raised). Browser tests need this: Playwright's sync API keeps an event
    loop on the test's thread, under which the channel layer's group_send
    does not run.

    The thread's database connection goes back to the pool when the call
    ends, as a request's does: a connection left with a finished thread is
    never returned, and the browser tests once left the process's pool too
    few connections for the placement race test that came after them."""
    from django.db import connection

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def checked_out_elsewhere() -> int:
    """Pooled connections held by threads other than this one (0 before
    the pool exists)."""
    if "django.db" not in sys.modules:
        return 0
    from django.db import DEFAULT_DB_ALIAS, connections

    wrapper = connections[DEFAULT_DB_ALIAS]
    pool = getattr(type(wrapper), "_connection_pools", {}).get(wrapper.alias)
    if pool is None:
        return 0
    stats = pool.get_stats()
    held_here = wrapper.connection is not None
    return int(stats["pool_size"] - stats["pool_available"]) - held_here


def left_after(held: int, seconds: float) -> int:
    """How many more pooled connections than `held` other threads still hold
    after waiting up to `seconds` for them to be given back (a connection
    handed back is the pool's again only once the pool has checked it)."""
    deadline = time.monotonic() + seconds
    while (left := checked_out_elsewhere() - held) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
