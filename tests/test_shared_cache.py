"""The default cache is one object for the process: a request's use of it
reuses the process's Redis connections.

An ASGI server runs each request in an asyncio task of its own, and
django.core.cache.cache is one object per context: used from a request,
it built a new client, which opened a Redis connection for one command.
The heartbeats' store (llmgw.inventory.coalesce) runs each batch so, and
asks for a reconcile when a shard changed."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from redis.connection import Connection

from llmgw.serving import tasks
from llmgw.shared_cache import shared


def test_asking_for_a_reconcile_from_fresh_requests_opens_no_connection_each(monkeypatch):
    assert "redis" in type(shared()).__module__, "the tests run on Redis, as production does"
    opened = []
    real = Connection._connect

    def connect(self):  # type: ignore[no-untyped-def]  # a socket opened
        opened.append(self)
        return real(self)

    # Asked for already: no task is sent, only the cache is asked.
    shared().set(tasks.SOON_KEY, 1, timeout=60)
    monkeypatch.setattr(Connection, "_connect", connect)
    executor = ThreadPoolExecutor(2)

    async def request() -> None:
        await sync_to_async(tasks.reconcile_soon, thread_sensitive=False, executor=executor)()

    async def requests() -> None:
        for _ in range(30):
            await asyncio.get_running_loop().create_task(request())

    try:
        # A context of its own, as a server's event loop has: nothing this
        # test process set in its contexts before is seen from it.
        contextvars.Context().run(asyncio.run, requests())
    finally:
        executor.shutdown()
        shared().delete(tasks.SOON_KEY)
    # One the first time a thread finds the pool empty, at most.
    assert len(opened) <= 2, f"{len(opened)} Redis connections opened for 30 requests"
