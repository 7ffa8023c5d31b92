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


def test_a_takeover_keeps_each_tasks_cadence() -> None:
    # A worker restarted hands the schedule to the other: a five-minute
    # task the first sent a moment ago is not sent again at the takeover
    # (it ran the fabric sweep at every restart), a task never sent is.
    key = f"llmgw:test-schedule:{uuid.uuid4().hex}"
    sent: list[tuple[str, str]] = []

    def tasks(w: str) -> dict[str, tuple[object, float]]:
        return {
            "slow": (lambda: sent.append((w, "slow")), 300.0),
            "tick": (lambda: sent.append((w, "tick")), 0.2),
        }

    def worker(w: str, stop: threading.Event) -> threading.Thread:
        lock = schedule.ClusterLock(settings.REDIS_URL, key=key, lease_s=1.5)
        t = threading.Thread(target=schedule.run, args=(tasks(w), lock, stop))
        t.start()
        return t

    stop_a = threading.Event()
    a = worker("a", stop_a)
    time.sleep(0.5)
    stop_a.set()
    a.join(5)
    assert ("a", "slow") in sent
    stop_b = threading.Event()
    b = worker("b", stop_b)
    time.sleep(1.0)
    stop_b.set()
    b.join(5)
    assert ("b", "tick") in sent and ("b", "slow") not in sent, sent
    # Nobody can say when it was sent (Redis forgot): sent at once.
    lock = schedule.ClusterLock(settings.REDIS_URL, key=key)
    lock.redis.delete(lock.sent_key("slow"))
    stop_c = threading.Event()
    c = worker("c", stop_c)
    time.sleep(0.5)
    stop_c.set()
    c.join(5)
    assert ("c", "slow") in sent, sent
