"""Per-model load, shared across processes: what the reconciler reads.

Every gateway process (one per web worker) writes its figures each second
into the Django cache under a key of its own that expires in a few seconds,
and lists itself in a small registry; `queue_depth` sums the fresh ones.
The cache is Redis when REDIS_URL is set. The embedded default's cache is
per-process memory, which the worker process cannot see, so there the
figures go to a file-based cache in the data directory instead.

Depth per model: requests waiting in the engines' queues (or, where a
replica's queue is unknown, the gateway's own requests still waiting for a
first byte), plus those waiting in the process's own queue for a free or a
first replica (flow.py), plus the requests refused in the last few seconds
(the retry-after the clients were given): with no replica, the demand is
the load, and it places the first one. Each process reports only its own
queue, so the sum over processes counts each waiting request once.
"""

from __future__ import annotations

import os
import socket
import time
from functools import cache
from typing import Any

from django.conf import settings
from django.core.cache import BaseCache

from llmgw.shared_cache import shared

REGISTRY = "llmgw:gateway:processes"
PREFIX = "llmgw:gateway:load:"
# A process that has not written for this long is gone (or stuck).
FRESH_S = 5.0


@cache
def store() -> BaseCache:
    default = shared()
    if "locmem" not in type(default).__module__:
        return default
    from django.core.cache.backends.filebased import FileBasedCache

    return FileBasedCache(str(settings.DATA_DIR / "gateway-load"), {"TIMEOUT": 60})


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def publish(
    depth: dict[str, float],
    in_flight: dict[str, int],
    requests: dict[str, dict[str, int]],
    process: str | None = None,
    latency: dict[str, Any] | None = None,
    routing: dict[str, dict[str, int]] | None = None,
) -> None:
    process = process or process_id()
    now = time.time()
    cache_ = store()
    cache_.set(
        PREFIX + process,
        {
            "at": now,
            "depth": depth,
            "in_flight": in_flight,
            "requests": requests,
            "latency": latency,
            "routing": routing,
        },
        timeout=int(FRESH_S * 4),
    )
    # Read-modify-write: two processes starting in the same instant can drop
    # each other, and each puts itself back on its next write.
    registry: dict[str, float] = cache_.get(REGISTRY) or {}
    if now - registry.get(process, 0.0) > FRESH_S:
        registry = {p: at for p, at in registry.items() if now - at < 60}
        registry[process] = now
        cache_.set(REGISTRY, registry, timeout=3600)


def withdraw(process: str | None = None) -> None:
    store().delete(PREFIX + (process or process_id()))


def reports() -> list[dict[str, Any]]:
    cache_ = store()
    registry: dict[str, float] = cache_.get(REGISTRY) or {}
    if not registry:
        return []
    now = time.time()
    found = cache_.get_many([PREFIX + p for p in registry])
    return [r for r in found.values() if now - r.get("at", 0.0) <= FRESH_S]


def queue_depth(model_name: str) -> float | None:
    """Requests waiting for `model_name` across every gateway process; None
    when no gateway has reported lately (unknown, not zero)."""
    fresh = reports()
    if not fresh:
        return None
    return float(sum(r["depth"].get(model_name, 0.0) for r in fresh))
