"""However many workers run, each periodic task is sent once per interval,
and when the worker sending them dies another takes over."""

from __future__ import annotations

import threading
import time
import uuid

from django.conf import settings

from llmgw import schedule


def test_two_workers_send_each_periodic_task_once_and_one_takes_over() -> None:
    key = f"llmgw:test-schedule:{uuid.uuid4().hex}"
    sent: list[str] = []
    stops = {w: threading.Event() for w in ("a", "b")}
    threads = {
        w: threading.Thread(
            target=schedule.run,
            args=(
                {"tick": (lambda w=w: sent.append(w), 0.2)},
                schedule.ClusterLock(settings.REDIS_URL, key=key, lease_s=1.5),
                stops[w],
            ),
        )
        for w in ("a", "b")
    }
    for t in threads.values():
        t.start()
    time.sleep(2.0)
    first = list(sent)
    # One worker sent every tick: ~10 in 2 s at 0.2 s, not ~20.
    assert len(set(first)) == 1 and 7 <= len(first) <= 12, first
    holder = first[0]
    other = "b" if holder == "a" else "a"
    stops[holder].set()
    threads[holder].join(5)
    time.sleep(2.5)  # the lease is given back on a clean stop; a dead holder's runs out
    stops[other].set()
    threads[other].join(5)
    after = sent[len(first) :]
    assert other in after and holder not in after[-3:], after


def test_a_worker_takes_the_schedule_over_when_a_dead_holders_lease_runs_out() -> None:
    key = f"llmgw:test-schedule:{uuid.uuid4().hex}"
    lock = schedule.ClusterLock(settings.REDIS_URL, key=key, lease_s=1.5)
    lock.redis.set(key, "a-worker-killed-with-its-lease", px=1500)  # never renewed
    sent: list[float] = []
    stop = threading.Event()
    started = time.monotonic()
    t = threading.Thread(
        target=schedule.run,
        args=({"tick": (lambda: sent.append(time.monotonic() - started), 0.2)}, lock, stop),
    )
    t.start()
    time.sleep(3.0)
    stop.set()
    t.join(5)
    assert sent, "nobody took the schedule over"
    assert 1.4 <= sent[0] <= 2.5, sent[:3]
