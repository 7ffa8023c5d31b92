"""Heartbeats arriving together, stored together.

Each web process holds one Coalescer. A heartbeat handed to it waits a
tick (50 ms) or while the statement before it runs, then goes with every
other heartbeat that arrived meanwhile in one statement (heartbeat_batch):
under light load a heartbeat is written nearly at once, nearly alone; under
heavy load the batches grow,
and PostgreSQL's cost per heartbeat falls as the load rises, which is the
shape group commit has. Each heartbeat is answered only once its batch has
committed, so an answer still means "stored".

Writes run in one thread of their own with its own database connection,
so the event loop never waits on SQL and batches never interleave. A
heartbeat whose sections changed (every node's first, a joining fleet's
all at once) is then stored durably in its node's own transaction: those
run several at once (half the requests' pool's worth) in threads of
their own, so they neither queue one behind the other nor hold up the
batches of everyone else's heartbeats. Each runs under its node's row
lock and compares the digests again there, so two heartbeats of one node
never both store a section. Both kinds of thread take their connections
from a pool the requests cannot touch (llmgw.database.own): a burst of
API calls slows the API, not the heartbeats.

Both kinds of thread are entered through sync_to_async, so an event sent
on commit (llmgw.events: the console's group_send) runs on this process's
event loop, as a request's does, rather than on a new loop in a new thread
each time, which cost more than the section writes themselves.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection

from llmgw.database import own
from llmgw.inventory import heartbeats

log = logging.getLogger("llmgw.inventory")

Answer = dict[str, Any] | None
# Each heartbeat's answer, or its durable store still to run.
Store = Callable[[list[heartbeats.Incoming]], list[Answer | heartbeats.Durable]]


def _store(batch: list[heartbeats.Incoming]) -> list[Answer | heartbeats.Durable]:
    close_old_connections()
    return heartbeats.store_batch(batch)


def _store_durable(durable: heartbeats.Durable) -> None:
    close_old_connections()
    try:
        durable.store()
    finally:
        # Back to the writers' pool after each: these threads are idle but
        # while a fleet joins, and the batch writer shares that pool.
        connection.close()


def _close() -> None:
    connection.close()  # the calling thread's own: the proxy is looked up there


# This process's coalescers (one, but for tests), for behind_s.
_coalescers: weakref.WeakSet[Coalescer] = weakref.WeakSet()


def behind_s(now: datetime, wait_s: float) -> float:
    """How far this process is behind with its heartbeats, in seconds: the
    age of the oldest one not yet answered; and at least `wait_s` when an
    event loop that stores them did not run a callback within `wait_s`
    (requests it has not even read yet wait behind it). 0.0 when none is
    waiting. Called from another thread than the loops' own (it blocks up
    to `wait_s` for each)."""
    behind = 0.0
    for coalescer in list(_coalescers):
        behind = max(behind, coalescer.oldest_s(now))
        loop = coalescer.loop
        if loop is None or loop.is_closed():
            continue
        ran = threading.Event()
        try:
            loop.call_soon_threadsafe(ran.set)
        except RuntimeError:  # closed meanwhile
            continue
        if not ran.wait(wait_s):
            behind = max(behind, wait_s)
    return behind


class Coalescer:
    def __init__(
        self,
        tick_s: float = 0.05,
        max_batch: int = 1000,
        store: Store = _store,
        durable_threads: int | None = None,
    ) -> None:
        self.tick_s = tick_s
        self.max_batch = max_batch
        self.store = store
        # As many as half the requests' pool, from the heartbeat writers'
        # own pool (llmgw.database.own), beside the batch writer's one.
        self.durable_threads = durable_threads or max(1, settings.DATABASE_POOL_MAX // 2)
        self._waiting: list[tuple[heartbeats.Incoming, asyncio.Future[Answer]]] = []
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._db: ThreadPoolExecutor | None = None
        self._durable: ThreadPoolExecutor | None = None
        self._storing: set[asyncio.Task[None]] = set()
        # What this process wrote: heartbeats and the statements that took them.
        self.heartbeats = 0
        self.batches = 0
        # When each heartbeat not yet answered arrived (behind_s), and the
        # loop they are answered on.
        self._arrivals: dict[asyncio.Future[Answer], datetime] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        _coalescers.add(self)

    def oldest_s(self, now: datetime) -> float:
        """Seconds the oldest heartbeat not yet answered has waited (0.0:
        none). Read from another thread: the copy is taken whole, under
        the GIL, before it is looked through."""
        try:
            arrivals = list(self._arrivals.values())
        except RuntimeError:  # changed while copied: none is lost by asking again
            arrivals = list(self._arrivals.values())
        if not arrivals:
            return 0.0
        return max(0.0, (now - min(arrivals)).total_seconds())

    async def submit(
        self, name: str, credential_hash: str, data: dict[str, Any], at: datetime
    ) -> Answer:
        """The heartbeat's answer once it is committed; None when its
        credential is unknown or revoked (nothing of it was written)."""
        if self._writer is None or self._writer.done():
            self._wake = asyncio.Event()
            # Their own pool, one connection each: requests cannot take them.
            reserved = own.use("heartbeats", 1 + self.durable_threads)
            self._db = self._db or ThreadPoolExecutor(
                1, thread_name_prefix="llmgw-heartbeats", initializer=reserved
            )
            self._durable = self._durable or ThreadPoolExecutor(
                self.durable_threads, thread_name_prefix="llmgw-sections", initializer=reserved
            )
            self._writer = asyncio.create_task(self._write_forever())
        self.loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = self.loop.create_future()
        self._arrivals[future] = at
        future.add_done_callback(self._answered)
        self._waiting.append(((name, credential_hash, data, at), future))
        assert self._wake is not None
        self._wake.set()
        return await future

    def _answered(self, future: asyncio.Future[Answer]) -> None:
        self._arrivals.pop(future, None)

    async def close(self) -> None:
        """Stop writing and close the writer thread's database connection."""
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None
        # The durable stores under way finish and are answered; each one
        # has closed its own connection.
        await asyncio.gather(*self._storing, return_exceptions=True)
        if self._durable is not None:
            self._durable.shutdown()
            self._durable = None
        if self._db is not None:
            await asyncio.get_running_loop().run_in_executor(self._db, _close)
            self._db.shutdown()
            self._db = None

    def _take(self) -> list[tuple[heartbeats.Incoming, asyncio.Future[Answer]]]:
        """Up to max_batch heartbeats, one per node: a node's second
        heartbeat in one tick waits for the next (one statement cannot
        update a row twice)."""
        batch: list[tuple[heartbeats.Incoming, asyncio.Future[Answer]]] = []
        later: list[tuple[heartbeats.Incoming, asyncio.Future[Answer]]] = []
        names: set[str] = set()
        for item in self._waiting:
            name = item[0][0]
            if name in names or len(batch) >= self.max_batch:
                later.append(item)
            else:
                names.add(name)
                batch.append(item)
        self._waiting = later
        return batch

    async def _write_forever(self) -> None:
        assert self._wake is not None
        store = sync_to_async(self.store, thread_sensitive=False, executor=self._db)
        while True:
            await self._wake.wait()
            # A moment for the others arriving now to join the batch: a
            # statement costs PostgreSQL about the same for one row as for
            # dozens, and this is well inside a heartbeat's budget.
            await asyncio.sleep(self.tick_s)
            self._wake.clear()
            while self._waiting:
                batch = self._take()
                try:
                    answers = await store([incoming for incoming, _ in batch])
                except Exception as exc:  # noqa: BLE001 - each waiting request answers for it
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                self.heartbeats += len(batch)
                self.batches += 1
                for (_, future), answer in zip(batch, answers, strict=True):
                    if isinstance(answer, heartbeats.Durable):
                        task = asyncio.create_task(self._store_durable(answer, future))
                        # Held until done: the loop keeps only weak references.
                        self._storing.add(task)
                        task.add_done_callback(self._storing.discard)
                    elif not future.done():
                        future.set_result(answer)

    async def _store_durable(
        self, durable: heartbeats.Durable, future: asyncio.Future[Answer]
    ) -> None:
        """The heartbeat's durable store, then its answer, or the store's
        failure for the request to answer."""
        store = sync_to_async(_store_durable, thread_sensitive=False, executor=self._durable)
        try:
            await store(durable)
        except Exception as exc:  # noqa: BLE001 - the waiting request answers for it
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(durable.answer)
