"""The periodic schedule (CELERY_BEAT_SCHEDULE), run once per cluster.

Every `llmgw worker` runs this loop, but only the one holding the
cluster's schedule lock sends the tasks: two workers each embedding
Celery's beat ran every periodic task twice (and two reconcilers at the
same moment). The lock is a Redis key with a short lease, renewed while
its holder lives; when the holder dies, another worker takes the
schedule over within one lease. Without Redis (the embedded default, one
worker) there is nobody to share with and the loop always holds it.

Each task's cadence outlives its sender: the holder notes in Redis when
it sent each task, and a worker that takes the schedule over sends each
when the last holder would have. Sending every task at once on each
takeover ran the five-minute fabric sweep at every worker restart, and
its maps were parsed while 5,000 agents came back.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("llmgw.schedule")

LOCK_KEY = "llmgw:schedule"
LEASE_S = 15.0


class ClusterLock:
    """A lease on one Redis key: take it if free, renew it if ours."""

    # Renew or give back only our own lease: compare and act in one step.
    _RENEW = (
        "if redis.call('get', KEYS[1]) == ARGV[1] then "
        "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
    )
    _RELEASE = (
        "if redis.call('get', KEYS[1]) == ARGV[1] then "
        "return redis.call('del', KEYS[1]) else return 0 end"
    )

    def __init__(self, redis_url: str, key: str = LOCK_KEY, lease_s: float = LEASE_S) -> None:
        import redis

        self.redis = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        self.key, self.lease_s, self.lease_ms = key, lease_s, int(lease_s * 1000)
        self.token = uuid.uuid4().hex

    def hold(self) -> bool:
        """True while this process holds the lease (taking or renewing it)."""
        try:
            if self.redis.set(self.key, self.token, nx=True, px=self.lease_ms):
                return True
            return bool(self.redis.eval(self._RENEW, 1, self.key, self.token, self.lease_ms))
        except Exception as exc:  # noqa: BLE001 - no Redis, no lease; the loop goes on
            log.warning("schedule lock: %s", exc)
            return False

    def release(self) -> None:
        try:
            self.redis.eval(self._RELEASE, 1, self.key, self.token)
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            log.warning("schedule lock release: %s", exc)

    def sent_key(self, name: str) -> str:
        """Where the holder notes when it last sent the task (wall clock)."""
        return f"{self.key}:sent:{name}"

    def sent(self, name: str, every: float) -> None:
        """Note that the task was sent now, for whoever holds the schedule next."""
        try:
            self.redis.set(self.sent_key(name), time.time(), ex=int(every * 2) + 60)
        except Exception as exc:  # noqa: BLE001 - a takeover then sends it at once
            log.warning("schedule: noting %s: %s", name, exc)

    def wait_s(self, name: str, every: float) -> float:
        """Seconds until the task is due by the last holder's cadence; 0 if
        it was never sent, or nobody can say."""
        try:
            last = self.redis.get(self.sent_key(name))
        except Exception as exc:  # noqa: BLE001 - sent at once: a tick early is harmless
            log.warning("schedule: reading when %s was sent: %s", name, exc)
            return 0.0
        if last is None:
            return 0.0
        return min(max(0.0, float(last) + every - time.time()), every)


class AlwaysHeld:
    """One process alone: a start sends every task at once."""

    lease_s = LEASE_S

    def hold(self) -> bool:
        return True

    def release(self) -> None:
        pass

    def sent(self, name: str, every: float) -> None:
        pass

    def wait_s(self, name: str, every: float) -> float:
        return 0.0


def run(
    schedule: Mapping[str, tuple[Callable[[], Any], float]],
    lock: ClusterLock | AlwaysHeld,
    stop: threading.Event,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Send each task when due, while this process holds the schedule. A
    worker that takes the schedule over keeps each task's cadence where the
    last holder left it (a task it never sent goes at once): a tick late
    is harmless, a tick twice is what the lock is for."""
    due = dict.fromkeys(schedule, 0.0)
    renew_every = lock.lease_s / 3
    held, checked = False, -renew_every
    try:
        while not stop.is_set():
            now = clock()
            if now - checked >= renew_every:
                was, held, checked = held, lock.hold(), now
                if held != was:
                    log.info("schedule %s", "taken: sending periodic tasks" if held else "lost")
                    due = {
                        name: now + lock.wait_s(name, every)
                        for name, (_, every) in schedule.items()
                    }
            if held:
                for name, (send, every) in schedule.items():
                    if now >= due[name]:
                        due[name] = now + every
                        try:
                            send()
                        except Exception:
                            log.exception("periodic task %s failed", name)
                        else:
                            lock.sent(name, every)
            wait = min([*due.values(), checked + renew_every]) - clock()
            stop.wait(max(0.05, min(wait, renew_every)))
    finally:
        if held:
            lock.release()
