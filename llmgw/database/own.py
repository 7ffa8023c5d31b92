"""Pools of their own for the threads that keep the fleet alive.

A web process's requests and its heartbeat writers shared one pool of
LLMGW_DB_POOL_MAX connections. Eight placements at once through the API
each held one while they queued for the model's row lock, and the
heartbeat writer waited behind them for a connection: at 5,000 nodes the
simulator's heartbeats timed out, three missed beats later some 3,000 nodes
were NotReady, and their replicas were lost and placed again. A burst of
API calls must slow the API, never the heartbeats that tell the control
plane which nodes are alive.

So a thread may be given a pool of its own (an executor's initializer
calls `use`): its connections come from that pool, sized for its
threads alone, and requests can never take them. Everything else about
the connection (its settings, its deadlines, its answers counted by
llmgw.database.queue) is the default database's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from psycopg_pool import ConnectionPool

_thread = threading.local()
_sizes: dict[str, int] = {}
_creating = threading.Lock()


def use(name: str, size: int) -> Callable[[], None]:
    """An initializer for the threads of an executor: each takes its
    connections from the pool `name`, of `size` connections shared by all
    the threads that name it."""
    _sizes[name] = max(_sizes.get(name, 0), size)

    def initializer() -> None:
        _thread.pool = name

    return initializer


def name() -> str | None:
    """The pool of this thread's own, if it has one."""
    return getattr(_thread, "pool", None)


def pool_for(wrapper: Any, pools: dict[str, ConnectionPool], own: str) -> ConnectionPool:
    """The pool `own` of the database `wrapper` speaks to, created on first
    use as Django creates its own (psycopg_pool, closed until first asked),
    with the default pool's options but its own size."""
    key = f"{wrapper.alias}/{own}"
    pool = pools.get(key)
    if pool is not None:
        return pool
    with _creating:
        if key not in pools:
            configured = wrapper.settings_dict["OPTIONS"]["pool"]
            options = dict(configured) if isinstance(configured, dict) else {}
            options["max_size"] = _sizes[own]
            options["min_size"] = min(int(options.get("min_size", 1)), _sizes[own])
            kwargs = wrapper.get_connection_params()
            kwargs["autocommit"] = True  # as Django's: it sets its own later
            checks = wrapper.settings_dict["CONN_HEALTH_CHECKS"]
            pools[key] = ConnectionPool(
                kwargs=kwargs,
                open=False,
                configure=wrapper._configure_connection,
                check=ConnectionPool.check_connection if checks else None,
                name=key,
                **options,
            )
    return pools[key]
