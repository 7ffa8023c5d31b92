"""The gateway's key table: a SHA-256 and a dictionary lookup per request.

The whole table is loaded on a beat and swapped in; a key made since it
loaded is looked up in the database once, many such lookups sharing one
query.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from llmgw.serving.gateway import snapshot
from llmgw.serving.gateway.asgi import Scope
from llmgw.serving.gateway.snapshot import KeyScope

log = logging.getLogger("llmgw.gateway")

# Unknown keys looked up in one query, at most.
LOOKUP_BATCH = 1000


class KeyTable:
    def __init__(self, in_db_thread: Callable[..., Awaitable[Any]]) -> None:
        self._in_db_thread = in_db_thread
        self.keys: dict[str, KeyScope] = {}
        self.loaded_at = 0.0
        self.lookups = 0
        # Digests looked up in the database since the table last loaded,
        # awaiting one shared query; and digests no usable key will ever
        # have (a key is 256 random bits made by this control plane, and a
        # revoked one stays revoked: absent now is absent for good, so a
        # client retrying a wrong key costs one query). A disabled user's
        # key can come back: it is "held", forgotten at every table load.
        self._missing: dict[str, asyncio.Future[KeyScope | None]] = {}
        self._lookup: asyncio.Task[None] | None = None
        self._strangers: set[str] = set()
        self._held: set[str] = set()

    async def load(self) -> None:
        started = time.monotonic()
        self.keys = await self._in_db_thread(snapshot.load_keys_now)
        self._held = set()
        self.loaded_at = started

    async def stop(self) -> None:
        if self._lookup is not None:
            self._lookup.cancel()
            await asyncio.gather(self._lookup, return_exceptions=True)
        self._lookup, self._missing = None, {}

    async def find(self, scope: Scope, routes_loaded: bool) -> KeyScope | None:
        """The request's key; None for no key, a wrong one, or one cut."""
        for name, value in scope["headers"]:
            if name == b"authorization":
                if value[:7].lower() != b"bearer ":
                    return None
                digest = hashlib.sha256(value[7:].strip()).hexdigest()
                found = self.keys.get(digest)
                if (
                    found is not None
                    or not routes_loaded
                    or digest in self._strangers
                    or digest in self._held
                ):
                    return found
                # Not in the table: perhaps made since it loaded. `keys
                # create` returning means the key is committed, so the
                # database says; the next request must not be refused.
                return await self._look_up(digest)
        return None

    async def _look_up(self, digest: str) -> KeyScope | None:
        waiting = self._missing.get(digest)
        if waiting is None:
            waiting = self._missing[digest] = asyncio.get_running_loop().create_future()
            if self._lookup is None or self._lookup.done():
                self._lookup = asyncio.create_task(self._look_up_missing())
        return await asyncio.shield(waiting)

    async def _look_up_missing(self) -> None:
        """Every digest missed meanwhile, in one query per round: a flood of
        wrong keys queues behind one lookup, not one query each."""
        while self._missing:
            batch = dict(itertools.islice(self._missing.items(), LOOKUP_BATCH))
            for digest in batch:
                del self._missing[digest]
            started = time.monotonic()
            self.lookups += 1
            try:
                found, held = await self._in_db_thread(snapshot.look_up, list(batch))
            except Exception:
                # Refused as before this lookup existed; never remembered as
                # a stranger, so the next request asks again.
                log.exception("gateway: looking up %d key(s) failed", len(batch))
                for waiting in batch.values():
                    if not waiting.done():
                        waiting.set_result(None)
                continue
            self._remember(batch, found, held, started)

    def _remember(
        self,
        batch: dict[str, asyncio.Future[KeyScope | None]],
        found: dict[str, KeyScope],
        held: set[str],
        started: float,
    ) -> None:
        # A table loaded after this query began is newer (a key revoked
        # meanwhile is out of it): add to it only what it cannot know.
        fresh = self.loaded_at <= started
        for digest, waiting in batch.items():
            key = found.get(digest)
            if key is None and digest in held:
                if fresh:
                    self._held.add(digest)
            elif key is None:
                if len(self._strangers) >= 100_000:
                    self._strangers.clear()  # bounded; a stranger then costs one more query
                self._strangers.add(digest)
            elif fresh:
                self.keys[digest] = key
            if not waiting.done():
                waiting.set_result(key)
