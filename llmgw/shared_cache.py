"""The default cache as one object for the whole process.

django.core.cache.cache is one object per thread and asyncio context
(asgiref's Local), and an ASGI server runs each request in a context of
its own: every use of it from a request built a new RedisCache, which
opened a Redis connection, with its handshake, for that one command and
dropped it after. A tenth of a web process's CPU went to it while
placements started replicas (each shard's change asks for a reconcile).
One object keeps one connection pool for every thread; redis-py's pool
and client are thread-safe.
"""

from __future__ import annotations

import functools

from django.core.cache import BaseCache, caches


@functools.cache
def shared() -> BaseCache:
    return caches["default"]
