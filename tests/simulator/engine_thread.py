"""The simulator's shard endpoint (llmgw.simulator.engine) on an event loop
of its own in a thread, as `llmgw simulate --serve-shards` runs it on the
simulator's loop, for tests that talk to it over real HTTP."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from llmgw.simulator.engine import Endpoint


@contextmanager
def running(endpoint: Endpoint) -> Iterator[Endpoint]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(endpoint.start(), loop).result(10)
        yield endpoint
    finally:
        asyncio.run_coroutine_threadsafe(endpoint.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
