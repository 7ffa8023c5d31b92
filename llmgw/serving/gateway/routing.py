"""The routing table: ready replicas per model, and how busy each one is.

A replica's load is the gateway's own count of requests in flight to it
plus the queue its engine last reported (scraped from /metrics off the
request path), the latter ignored once older than `stale_s`: a number
nobody refreshed is unknown, not zero and not what it once was. The least
loaded replica wins, ties broken at random so that equal replicas share;
or, for a prompt, the replica that lately saw the longest start of it while
its load is close to the least (affinity.py).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from llmgw.serving.gateway.affinity import Affinity
from llmgw.serving.gateway.exposition import sum_samples
from llmgw.serving.gateway.snapshot import Route

# The engines' own count of requests waiting for a slot.
QUEUE_METRICS = frozenset(
    {"llamacpp:requests_deferred", "vllm:num_requests_waiting", "sglang:num_queue_reqs"}
)
# A replica that refused a connection or failed with a 5xx is tried last
# for this long: with no requests in flight it would otherwise look like the
# least loaded replica and be picked (and fail) first every time.
BACKOFF_S = 5.0


@dataclass(slots=True, eq=False)
class Upstream:
    replica_id: int
    model: str
    url: str
    engine: str
    in_flight: int = 0
    # Sent, no first byte back yet: queued in the engine or prefilling.
    waiting: int = 0
    engine_queue: float | None = None
    scraped_at: float = 0.0
    down_until: float = 0.0
    # Stable per replica, for metric labels.
    label: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.label = str(self.replica_id)

    def fresh_queue(self, now: float, stale_s: float) -> float | None:
        if self.engine_queue is None or now - self.scraped_at > stale_s:
            return None
        return self.engine_queue

    def load(self, now: float, stale_s: float) -> float:
        return self.in_flight + (self.fresh_queue(now, stale_s) or 0.0)


def parse_queue_depth(text: str) -> float | None:
    """Sum the engine's queue metric over its label sets; None if absent."""
    return sum_samples(text, QUEUE_METRICS)


class Router:
    def __init__(self, stale_s: float = 15.0, affinity: Affinity | None = None) -> None:
        self.stale_s = stale_s
        self.affinity = affinity or Affinity.from_settings()
        self.models: frozenset[str] = frozenset()
        self.table: dict[str, list[Upstream]] = {}
        self.loaded = False

    def update(self, models: frozenset[str], routes: tuple[Route, ...]) -> None:
        """Swap in a new table, keeping the counters of replicas that stay."""
        known = {(u.replica_id, u.url): u for ups in self.table.values() for u in ups}
        table: dict[str, list[Upstream]] = {}
        for r in routes:
            up = known.get((r.replica_id, r.url)) or Upstream(
                r.replica_id, r.model, r.url, r.engine
            )
            table.setdefault(r.model, []).append(up)
        self.models, self.table, self.loaded = models, table, True
        # A replica gone, or back under another URL, holds no prefix of ours.
        self.affinity.retain(u for ups in table.values() for u in ups)

    def upstreams(self) -> list[Upstream]:
        return [u for ups in self.table.values() for u in ups]

    def pick(
        self, model: str, tried: list[Upstream] | None = None, hashes: list[int] | None = None
    ) -> Upstream | None:
        """The replica for a request; `hashes`, its prompt's blocks (affinity.py)."""
        up = self._pick(model, tried, hashes)
        if up is not None and hashes:
            self.affinity.record(up, hashes)
        return up

    def _pick(
        self, model: str, tried: list[Upstream] | None, hashes: list[int] | None
    ) -> Upstream | None:
        candidates = self.table.get(model)
        if not candidates:
            return None
        if len(candidates) == 1 and not tried:
            self.affinity.count(model, "load")
            return candidates[0]
        now = time.monotonic()
        if not tried:
            # A retry goes by load alone: the replica it left may hold the prefix.
            live = [u for u in candidates if u.down_until <= now]
            chosen = self.affinity.prefer(model, live, hashes, lambda u: u.load(now, self.stale_s))
            if chosen is not None:
                return chosen
        best: list[Upstream] = []
        best_key = (True, 0.0)
        for up in candidates:
            if tried and up in tried:
                continue
            key = (up.down_until > now, up.load(now, self.stale_s))
            if not best or key < best_key:
                best, best_key = [up], key
            elif key == best_key:
                best.append(up)
        if not best:
            return None
        return best[0] if len(best) == 1 else random.choice(best)

    def queue_depths(self) -> dict[str, float]:
        """Per model, requests waiting: each replica's engine queue when it
        is fresh (it counts the gateway's waiting requests too), else the
        gateway's own count of requests with no first byte yet."""
        now = time.monotonic()
        depths = dict.fromkeys(self.models, 0.0)
        for model, ups in self.table.items():
            total = 0.0
            for up in ups:
                queue = up.fresh_queue(now, self.stale_s)
                total += max(queue, up.waiting) if queue is not None else up.waiting
            depths[model] = total
        return depths

    def in_flight(self) -> dict[str, int]:
        counts = dict.fromkeys(self.models, 0)
        for model, ups in self.table.items():
            counts[model] = sum(u.in_flight for u in ups)
        return counts
