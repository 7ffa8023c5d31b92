"""Each web process hears every change to tokens, users and groups, and
drops its copy of them (llmgw.accounts.token_cache) at once.

Triggers (migration 0005) NOTIFY `llmgw_credentials` on every statement
that writes accounts_apitoken, auth_user, auth_user_groups or auth_group.
PostgreSQL delivers a notice on commit, to every connection that LISTENs,
whoever wrote: a revoked token, a disabled user or a demoted operator is
refused by every web process within a round trip of the commit. A thread
of each web process listens on a connection of its own, started by the
ASGI lifespan as the hearing thread is (llmgw.inventory.listening): a
process without the lifespan never trusts a copy.

Every PING_S the thread asks the server something: an answer proves the
connection alive and that every notice of a commit before the question
has arrived (the server sends a connection's notices before its answers).
A failed connection drops the copy and bypasses it until LISTEN succeeds
again; a silent one stops being trusted after token_cache.STALE_S.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections

from llmgw.accounts import token_cache

log = logging.getLogger("llmgw.accounts")

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]

CHANNEL = "llmgw_credentials"
# How often the listener asks the server something (see above).
PING_S = 1.0
# How long it waits before connecting again after losing its connection.
RETRY_S = 1.0
# So that tests and operators can tell the listener's connection apart.
APPLICATION_NAME = "llmgw credential listener"


def _connect() -> psycopg.Connection[Any]:
    params = dict(connections["default"].get_connection_params())
    # Django's own keyword arguments, not connection parameters.
    for name in ("context", "cursor_factory", "prepare_threshold"):
        params.pop(name, None)
    return psycopg.connect(
        **params,
        autocommit=True,
        application_name=APPLICATION_NAME,
        # A peer that vanished without a word is noticed in seconds, not
        # the kernel's hours (ignored on a Unix socket, which cannot).
        keepalives=1,
        keepalives_idle=5,
        keepalives_interval=2,
        keepalives_count=3,
        tcp_user_timeout=10_000,
    )


def _listen_once(stop: threading.Event, cache: token_cache.TokenCache) -> None:
    with _connect() as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        log.info("listening for credential changes")
        while not stop.is_set():
            asked = time.monotonic()
            conn.execute("SELECT 1")
            # Every notice of a change committed before `asked` is here now.
            for _ in conn.notifies(timeout=0):
                cache.clear()
            if stop.is_set():
                break
            cache.heard(asked)
            for _ in conn.notifies(timeout=PING_S):
                cache.clear()


def listen(stop: threading.Event, cache: token_cache.TokenCache) -> None:
    while not stop.is_set():
        try:
            _listen_once(stop, cache)
        except Exception as exc:  # the database away: read it directly meanwhile
            log.warning("credential changes not heard, tokens read each request: %s", exc)
        cache.lost()
        stop.wait(RETRY_S)


def start(cache: token_cache.TokenCache | None = None) -> Callable[[], None]:
    """Listen, and trust the copy while listening, until the function
    returned is called: it waits for the listener to end, its copy dropped
    (a process that stops listening, a test's lifespan, trusts nothing)."""
    stop = threading.Event()
    thread = threading.Thread(
        target=listen,
        args=(stop, token_cache.CACHE if cache is None else cache),
        name="credential listener",
        daemon=True,
    )
    thread.start()

    def stopped() -> None:
        stop.set()
        thread.join(PING_S + 10)

    return stopped


def lifespan(inner: Asgi) -> Asgi:
    """The ASGI lifespan `inner`, with credential changes heard from
    startup to shutdown (unless LLMGW_CREDENTIAL_CACHE is off)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        stop: Callable[[], None] | None = None

        async def received() -> Any:
            nonlocal stop
            message = await receive()
            if message["type"] == "lifespan.startup" and stop is None and settings.CREDENTIAL_CACHE:
                stop = start()
            elif message["type"] == "lifespan.shutdown" and stop is not None:
                await asyncio.to_thread(stop)
            return message

        await inner(scope, received, send)

    return app
