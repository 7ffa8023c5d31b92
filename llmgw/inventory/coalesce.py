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
so the event loop never waits on SQL and batches never interleave.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from django.db import close_old_connections, connection

from llmgw.inventory import heartbeats

log = logging.getLogger("llmgw.inventory")

Answer = dict[str, Any] | None
Store = Callable[[list[heartbeats.Incoming]], list[Answer]]


def _store(batch: list[heartbeats.Incoming]) -> list[Answer]:
    close_old_connections()
    return heartbeats.store_many(batch)


def _close() -> None:
    connection.close()  # the calling thread's own: the proxy is looked up there


class Coalescer:
    def __init__(self, tick_s: float = 0.05, max_batch: int = 1000, store: Store = _store) -> None:
        self.tick_s = tick_s
        self.max_batch = max_batch
        self.store = store
        self._waiting: list[tuple[heartbeats.Incoming, asyncio.Future[Answer]]] = []
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._db: ThreadPoolExecutor | None = None
        # What this process wrote: heartbeats and the statements that took them.
        self.heartbeats = 0
        self.batches = 0

    async def submit(
        self, name: str, credential_hash: str, data: dict[str, Any], at: datetime
    ) -> Answer:
        """The heartbeat's answer once it is committed; None when its
        credential is unknown or revoked (nothing of it was written)."""
        if self._writer is None or self._writer.done():
            self._wake = asyncio.Event()
            self._db = self._db or ThreadPoolExecutor(1, thread_name_prefix="llmgw-heartbeats")
            self._writer = asyncio.create_task(self._write_forever())
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting.append(((name, credential_hash, data, at), future))
        assert self._wake is not None
        self._wake.set()
        return await future

    async def close(self) -> None:
        """Stop writing and close the writer thread's database connection."""
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None
        if self._db is not None:
            await asyncio.get_running_loop().run_in_executor(self._db, _close)
            self._db.shutdown()
            self._db = None

    def _take(self) -> list[tuple[heartbeats.Incoming, asyncio.Future[Answer]]]:
        """Up to max_batch heartbeats, one per node: a node's second
        heartbeat in one tick waits for the next (one statement cannot
        update a row twice)."""
        batch, later, names = [], [], set()
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
        loop = asyncio.get_running_loop()
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
                    answers = await loop.run_in_executor(
                        self._db, self.store, [incoming for incoming, _ in batch]
                    )
                except Exception as exc:  # noqa: BLE001 - each waiting request answers for it
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                self.heartbeats += len(batch)
                self.batches += 1
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():
                        future.set_result(answer)
