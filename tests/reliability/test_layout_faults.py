"""The production layout (tests/reliability/cluster.py), broken one way per
scenario, each printing what it measured. Every scenario ends on the same
invariants: each held model has exactly its replicas, no GPU is claimed
twice, no claim is left with a lost replica, no live shard is left on a
NotReady node, no engine runs that no live shard names, and no node whose
agent kept running was marked NotReady (tests/reliability/checks.py)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest

from tests.reliability.checks import (
    GRACE_S,
    INTERVAL_S,
    MARGIN_S,
    RECONCILE_EVERY_S,
    STALENESS_EVERY_S,
    settled_after_grace,
    spurious,
)
from tests.reliability.cluster import Cluster
from tests.reliability.conftest import FLEETS, NODES
from tests.reliability.figures import percentile, record, seconds
from tests.reliability.load import CUT, PATH, Load, burst

pytestmark = pytest.mark.slow

# A request during a database outage waits at most for a pooled
# connection (LLMGW_DB_POOL_TIMEOUT_S, 10) or for its statement's deadline
# (LLMGW_DB_DEADLINE_S, 8), whichever it meets.
DB_BOUND_S = 10.0
# LLMGW_DB_POOL_MAX: the connections each process's pool may hold;
# LLMGW_DB_QUEUE_S: how long a call may queue for one.
POOL_MAX, QUEUE_S = 8, 60.0


def probe(cluster: Cluster, until: float) -> list[tuple[int, float, str]]:
    """API calls, one after another on alternate web processes, until
    `until` (monotonic): (status, seconds, Retry-After) each."""
    out = []
    headers = {"Authorization": f"Token {cluster.token}"}
    with httpx.Client(headers=headers, timeout=120) as http:
        n = 0
        while time.monotonic() < until:
            sent = time.monotonic()
            try:
                r = http.get(cluster.urls[n % 2] + PATH)
                out.append(
                    (r.status_code, time.monotonic() - sent, r.headers.get("Retry-After", ""))
                )
            except httpx.HTTPError:
                out.append((0, time.monotonic() - sent, ""))
            n += 1
            time.sleep(0.2)
    return out


def seconds_to_first_200(cluster: Cluster, timeout_s: float = 120) -> float:
    started = time.monotonic()
    headers = {"Authorization": f"Token {cluster.token}"}
    with httpx.Client(headers=headers, timeout=30) as http:
        while time.monotonic() - started < timeout_s:
            try:
                if http.get(cluster.urls[0] + PATH).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
    raise AssertionError(f"the API did not answer 200 within {timeout_s} s")


def seconds_to_schedule(cluster: Cluster, since: datetime, timeout_s: float = 90) -> float:
    """Seconds until a staleness pass runs after `since`: the schedule is back."""
    return cluster.wait_sql(
        "SELECT count(*) FROM inventory_stalenesspass WHERE last_pass_at > %s", 1, timeout_s, since
    )


def test_node_power_loss(cluster: Cluster) -> None:
    before = set(cluster.marked_not_ready())
    victim = max(FLEETS, key=cluster.replicas_on)
    moved = cluster.replicas_on(victim)
    assert moved, "no replica on either fleet to lose"
    with Load(cluster.urls, cluster.token) as load:
        killed = time.monotonic()
        cluster.kill(cluster.fleets[victim])
        while cluster.replicas_on(victim) or any(cluster.census().values()):
            assert time.monotonic() - killed < 180, cluster.census()
            time.sleep(0.5)
        replaced = time.monotonic() - killed
    # A victim that held no replica is marked by the staleness pass after
    # its own last heartbeat, which may come after the replicas moved.
    marked = spurious(cluster, before)
    while len(marked) < FLEETS[victim] and (
        time.monotonic() - killed < GRACE_S + STALENESS_EVERY_S + MARGIN_S
    ):
        time.sleep(0.5)
        marked = spurious(cluster, before)
    p50, p99 = load.latencies()
    census = cluster.census()
    record(
        "node power loss", nodes_lost=FLEETS[victim], replicas_moved=moved,
        replaced_s=replaced, bound_s=GRACE_S + STALENESS_EVERY_S + RECONCILE_EVERY_S,
        marked_not_ready=len(marked), api_errors=sum(load.errors().values()),
        api_p50_ms=p50 * 1000, api_p99_ms=p99 * 1000, **census,
    )  # fmt: skip
    assert all(name.startswith(f"{victim}-") for name in marked), marked
    assert len(marked) == FLEETS[victim], marked
    # Not before the grace from the node's last heartbeat, at most one
    # interval before the kill (nothing taken for dead early), and within
    # the grace, a staleness pass and a reconciler tick of the kill.
    assert GRACE_S - INTERVAL_S - 1 <= replaced
    assert replaced <= GRACE_S + STALENESS_EVERY_S + RECONCILE_EVERY_S + MARGIN_S
    assert not load.errors() and not any(census.values())
    cluster.start_fleet(victim, FLEETS[victim])
    cluster.settle(NODES, 120)


def test_postgres_hung(cluster: Cluster) -> None:
    """SIGSTOP: connections stay open and every packet is acknowledged, so
    only the client's own deadline ends a request's wait."""
    hold = seconds(45, 20)
    before = set(cluster.marked_not_ready())
    cluster.pg.hang()
    try:
        answers = probe(cluster, time.monotonic() + hold)
    finally:
        cluster.pg.resume()
    recovered = seconds_to_first_200(cluster)
    census = settled_after_grace(cluster)
    slowest = max(t for _, t, _ in answers)
    statuses = sorted({s for s, _, _ in answers})
    marked = spurious(cluster, before)
    record(
        "postgres hung", hung_s=hold, requests=len(answers), statuses=statuses,
        slowest_s=slowest, p50_s=percentile([t for _, t, _ in answers], 50),
        recover_s=recovered, spurious_not_ready=len(marked), **census,
    )  # fmt: skip
    assert statuses == [503] and all(r == "5" for _, _, r in answers), answers
    assert slowest <= DB_BOUND_S + MARGIN_S / 2, answers
    assert not marked and not any(census.values())


def test_postgres_down(cluster: Cluster) -> None:
    down = seconds(60, 25)
    before = set(cluster.marked_not_ready())
    cluster.pg.stop()
    try:
        answers = probe(cluster, time.monotonic() + down)
    finally:
        cluster.pg.start()
    recovered = seconds_to_first_200(cluster)
    census = settled_after_grace(cluster)
    statuses = sorted({s for s, _, _ in answers})
    marked = spurious(cluster, before)
    record(
        "postgres down", down_s=down, requests=len(answers), statuses=statuses,
        slowest_s=max(t for _, t, _ in answers), recover_s=recovered,
        spurious_not_ready=len(marked), **census,
    )  # fmt: skip
    assert statuses == [503], answers
    assert max(t for _, t, _ in answers) <= DB_BOUND_S + MARGIN_S / 2
    assert not marked and not any(census.values())


def test_redis_down(cluster: Cluster) -> None:
    """The broker, the channel layer and the schedule's lease go; the API
    and the heartbeats (on PostgreSQL) carry on."""
    down = seconds(60, 20)
    before = set(cluster.marked_not_ready())
    cluster.redis.stop()
    try:
        with Load(cluster.urls, cluster.token) as load:
            time.sleep(down)
    finally:
        cluster.redis.start()
        back = datetime.now(UTC)
    schedule_s = seconds_to_schedule(cluster, back)
    census = settled_after_grace(cluster)
    marked = spurious(cluster, before)
    p50, p99 = load.latencies()
    record(
        "redis down", down_s=down, requests=len(load.samples),
        api_errors=dict(load.errors()), api_p50_ms=p50 * 1000, api_p99_ms=p99 * 1000,
        schedule_back_s=schedule_s, spurious_not_ready=len(marked), **census,
    )  # fmt: skip
    assert not load.errors(), load.errors()
    assert not marked and not any(census.values())


def test_kill_a_web_and_a_worker_under_load(cluster: Cluster) -> None:
    hold = seconds(30, 15)
    before = set(cluster.marked_not_ready())
    with Load(cluster.urls, cluster.token, workers=4) as load:
        time.sleep(2)
        killed = datetime.now(UTC)
        cluster.kill(cluster.webs[0])
        cluster.kill(cluster.workers[0])
        schedule_s = seconds_to_schedule(cluster, killed)
        time.sleep(max(0.0, hold - schedule_s))
        restarted = time.monotonic()
        cluster.start_web(0)
        cluster.start_worker(0)
        web_back = time.monotonic() - restarted
        time.sleep(2)
    census = settled_after_grace(cluster)
    marked = spurious(cluster, before)
    p50, p99 = load.latencies()
    record(
        "kill -9 web and worker under load", requests=len(load.samples),
        api_errors=dict(load.errors()), cut_in_flight=load.cut(), failed_over=load.failovers,
        api_p50_ms=p50 * 1000,
        api_p99_ms=p99 * 1000, schedule_back_s=schedule_s, web_back_s=web_back,
        spurious_not_ready=len(marked), **census,
    )  # fmt: skip
    # Only the requests in flight on the killed web process, one per client at most.
    assert set(load.errors()) <= {CUT} and load.cut() <= load.workers, load.errors()
    # The schedule's lease (15 s) runs out and the other worker takes it.
    assert schedule_s <= 15 + STALENESS_EVERY_S + MARGIN_S
    assert not marked and not any(census.values())


class Backends:
    """The peak of the control plane's PostgreSQL connections (web processes
    and workers, each worker's pool processes with pools of their own)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.peak = cluster, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, sum(self.cluster.backends().values()))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.peak


def test_concurrent_api_calls(cluster: Cluster) -> None:
    """Every call is answered 200: calls queue for their process's pooled
    connections while the database answers (llmgw.database.queue), and are
    shed (503 with Retry-After) only after LLMGW_DB_QUEUE_S; never a 500 or
    a dropped connection. No connection is left taken: afterwards each
    process answers as many calls at once as its pool holds."""
    count = int(seconds(500, 100))
    backends = Backends(cluster)
    answers, wall = burst(cluster.urls, cluster.token, count)
    peak = backends.stop()
    time.sleep(2)
    after = cluster.backends()
    again, _ = burst(cluster.urls, cluster.token, len(cluster.urls) * POOL_MAX)
    census = cluster.census()
    statuses = Counter(a.status for a in answers)
    latencies = [a.latency_s for a in answers]
    record(
        f"{count} concurrent API calls", answered=dict(statuses), wall_s=wall,
        p50_s=percentile(latencies, 50), slowest_s=max(latencies),
        peak_connections=peak, after=after,
        then_at_once=dict(Counter(a.status for a in again)), **census,
    )  # fmt: skip
    assert set(statuses) <= {200, 503}, statuses
    shed = [a for a in answers if a.status == 503]
    assert all(a.retry_after == "5" and a.latency_s >= QUEUE_S - 1 for a in shed), shed
    assert after.get("idle in transaction", 0) == 0, after
    assert {a.status for a in again} == {200}, again
    assert not any(census.values())
