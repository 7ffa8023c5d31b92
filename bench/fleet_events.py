"""What an operator of a fleet lives through, for `make bench-fleet` at its
largest size: every control-plane process restarted (all at once, then one
at a time with a migration run between), an outage of every process, and a
rack of nodes dying at once.

Each acts on the layout (bench/fleet_plane.py) as an operator or a power
cut would, and reads the outcome where it is recorded: NotReady marks in
the workers' logs (the staleness pass logs each one), replicas and
heartbeats as the database stores them, and the gateway's answers to a
client sending through it.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from bench.fleet_plane import Layout

FLEET = "name NOT LIKE 'probe-%%'"  # the benchmark's own probes are not the fleet
LIVE = (
    "SELECT r.id, array_agg(n.name ORDER BY n.name) FROM serving_replica r"
    " JOIN serving_shard s ON s.replica_id = r.id JOIN inventory_node n ON n.id = s.node_id"
    " WHERE r.state NOT IN ('lost', 'failed') GROUP BY r.id"
)
# GPUs claimed by more than one live replica: never allowed.
CLAIMED_TWICE = (
    "SELECT count(*) FROM (SELECT c.node_id, c.index FROM serving_gpuclaim c"
    " JOIN serving_shard s ON s.id = c.shard_id JOIN serving_replica r ON r.id = s.replica_id"
    " WHERE r.state NOT IN ('lost', 'failed') GROUP BY 1, 2 HAVING count(*) > 1) x"
)
# A model's ready replicas with no shard on the nodes named like the second
# parameter ('' matches no node).
READY_OFF = (
    "SELECT count(*) FROM serving_replica r JOIN catalog_model m ON m.id = r.model_id"
    " WHERE m.name = %s AND r.state = 'ready' AND NOT EXISTS (SELECT 1 FROM serving_shard s"
    " JOIN inventory_node n ON n.id = s.node_id WHERE s.replica_id = r.id AND n.name LIKE %s)"
)


@dataclass(frozen=True)
class Timings:
    """How the layout counts silence and reacts to it."""

    interval_s: float
    missed: int
    staleness_s: float
    reconcile_s: float

    @property
    def grace_s(self) -> float:
        return self.interval_s * self.missed

    @property
    def rack_target_s(self) -> float:
        """A dead node's replicas placed again and ready within its grace,
        one staleness pass, one reconciler tick, and 30 s."""
        return self.grace_s + self.staleness_s + self.reconcile_s + 30.0

    def settle(self) -> None:
        """A full grace and two staleness passes: a node wrongly taken for
        silent would have been marked by then."""
        time.sleep(self.grace_s + 2 * self.staleness_s)


def timings(layout: Layout, interval_s: float) -> Timings:
    missed, staleness, reconcile = layout.timings()
    return Timings(interval_s, missed, staleness, reconcile)


def live(layout: Layout) -> dict[int, tuple[str, ...]]:
    """Each live replica and the nodes its shards are on."""
    return {int(r): tuple(nodes) for r, nodes in layout.sql(LIVE)}


def moved(before: dict[int, tuple[str, ...]], after: dict[int, tuple[str, ...]]) -> int:
    """Replicas released, or now on other nodes."""
    return sum(1 for r, nodes in before.items() if after.get(r) != nodes)


def marks(layout: Layout, leave_out: tuple[str, ...] = ()) -> int:
    """NotReady marks of the fleet's nodes so far (the probes, silent once
    their measurement ends, are marked rightly and are not the fleet), and
    not of nodes named with any of `leave_out`."""
    skip = ("probe-", *leave_out)
    return sum(1 for name in layout.marked_not_ready() if not name.startswith(skip))


def database_now(layout: Layout) -> datetime:
    [(now,)] = layout.sql("SELECT now()")
    assert isinstance(now, datetime)
    return now


def fleet_size(layout: Layout) -> int:
    [(count,)] = layout.sql(f"SELECT count(*) FROM inventory_node WHERE {FLEET}")
    return int(count)


def heard_since(layout: Layout, since: datetime) -> int:
    [(count,)] = layout.sql(
        f"SELECT count(*) FROM inventory_node WHERE {FLEET} AND last_heartbeat_at >= %s", (since,)
    )
    return int(count)


@dataclass
class Heard:
    """Seconds until every node was heard again, and the most nodes heard
    for the first time in any one second (the return's peak rate)."""

    seconds: float
    peak_rate: float
    counts: list[tuple[float, int]] = field(default_factory=list)


def wait_heard(layout: Layout, since: datetime, timeout_s: float) -> Heard:
    """Poll until every node's heartbeat since `since` is stored."""
    total, started = fleet_size(layout), time.monotonic()
    counts: list[tuple[float, int]] = []
    while True:
        count = heard_since(layout, since)
        elapsed = time.monotonic() - started
        counts.append((elapsed, count))
        if count >= total:
            break
        if elapsed > timeout_s:
            raise RuntimeError(f"{count} of {total} nodes heard {timeout_s:.0f} s after the return")
        time.sleep(0.25)
    peak = 0.0
    for i, (t, n) in enumerate(counts):
        # The nodes first heard over the second (or more) before this poll.
        j = i
        while j > 0 and t - counts[j - 1][0] < 1.0:
            j -= 1
        if j > 0:
            peak = max(peak, (n - counts[j - 1][1]) / (t - counts[j - 1][0]))
    return Heard(counts[-1][0], peak, counts)


def _control_plane(layout: Layout) -> tuple[list[str], list[str]]:
    webs = sorted(n for n in layout.procs if n.startswith("web"))
    return webs, sorted(n for n in layout.procs if n.startswith("worker"))


def restarts(layout: Layout, timing: Timings) -> dict[str, float]:
    """Every web and worker process killed at once and started again; then
    each stopped and started in turn (SIGTERM, as a supervisor restarts
    one), with the migrations run between, as deploy/rolling-upgrade.sh
    does. NotReady marks and replicas moved across both; seconds until every
    node was heard again after the kill."""
    webs, workers = _control_plane(layout)
    marked, before = marks(layout), live(layout)
    for name in webs + workers:
        layout.stop(name, signal.SIGKILL)
    for name in webs + workers:
        layout.restart(name)
    layout.wait_webs(120)
    heard = wait_heard(layout, database_now(layout), 120)
    killed = 0  # stops that outlived their grace (docker compose's stop_grace_period)
    for name in webs + ["migrate"] + workers:
        if name == "migrate":
            layout.migrate()
            continue
        killed += not layout.stop(name, signal.SIGTERM, grace_s=10.0 if name in webs else 60.0)
        layout.restart(name)
        layout.wait_webs(120)
    timing.settle()
    return {
        "restart_not_ready": float(marks(layout) - marked),
        "restart_moved": float(moved(before, live(layout))),
        "restart_heard_s": heard.seconds,
        "restart_killed": float(killed),
    }


def outage(layout: Layout, timing: Timings, seconds: float) -> dict[str, float]:
    """Every control-plane process gone for `seconds`, then back at once:
    seconds from the return until every node is heard, the peak rate of
    nodes heard, NotReady marks and replicas moved."""
    webs, workers = _control_plane(layout)
    marked, before = marks(layout), live(layout)
    for name in webs + workers:
        layout.stop(name, signal.SIGKILL)
    time.sleep(seconds)
    for name in webs + workers:
        layout.restart(name)
    layout.wait_webs(120)
    heard = wait_heard(layout, database_now(layout), 300)
    timing.settle()
    return {
        "outage_heard_s": heard.seconds,
        "outage_peak_rate": heard.peak_rate,
        "outage_not_ready": float(marks(layout) - marked),
        "outage_moved": float(moved(before, live(layout))),
    }


class Traffic:
    """A client sending chat completions for one model through the gateway,
    one after another over the web processes, each answer's time and
    whether it succeeded."""

    def __init__(self, urls: list[str], key: str, model: str) -> None:
        self.urls, self.model = urls, model
        self.headers = {"Authorization": f"Bearer {key}"}
        self.answers: list[tuple[float, bool]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._send, name="gateway-traffic", daemon=True)

    def _send(self) -> None:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": "are you there?"}],
            "max_tokens": 4,
        }
        with httpx.Client(headers=self.headers, timeout=30) as client:
            n = 0
            while not self.stop.is_set():
                url = self.urls[n % len(self.urls)] + "/v1/chat/completions"
                n += 1
                try:
                    ok = client.post(url, json=body).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.answers.append((time.monotonic(), ok))
                self.stop.wait(0.05)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)

    def failed_after(self, moment: float) -> list[float]:
        return [t for t, ok in self.answers if not ok and t >= moment]


def wait_ready(
    layout: Layout, model: str, replicas: int, timeout_s: float, off: str | None = None
) -> float:
    """Seconds until `model` has `replicas` ready replicas (none of whose
    shards is on a node named `off`-*, if given)."""
    started = time.monotonic()
    while (count := _ready(layout, model, off)) < replicas:
        if time.monotonic() - started > timeout_s:
            where = f" off {off}-*" if off else ""
            raise RuntimeError(
                f"{model}: {count} of {replicas} replicas ready{where} after {timeout_s:.0f} s"
            )
        time.sleep(0.25)
    return time.monotonic() - started


def _ready(layout: Layout, model: str, off: str | None) -> int:
    [(count,)] = layout.sql(READY_OFF, (model, f"{off}-%" if off else ""))
    return int(count)


def rack_failure(
    layout: Layout, timing: Timings, model: str, prefix: str, replicas: int
) -> dict[str, float]:
    """The simulated nodes named `prefix`-* (a process of their own) die at
    once while a client sends through the gateway to `model`, which holds
    `replicas` replicas on them: seconds until as many are ready elsewhere,
    GPUs claimed twice, and the gateway's failures."""
    on_rack = replicas - _ready(layout, model, prefix)
    with Traffic(layout.urls, layout.gateway_key, model) as traffic:
        time.sleep(2.0)
        if not traffic.answers or not all(ok for _, ok in traffic.answers):
            raise RuntimeError(f"the gateway did not serve {model} before the failure")
        killed = time.monotonic()
        layout.stop(f"fleet-{prefix}", signal.SIGKILL)
        recovered_s = wait_ready(layout, model, replicas, timing.rack_target_s + 120, off=prefix)
        recovered = killed + recovered_s
        time.sleep(10.0)  # the gateway's answers once the replacements are ready
    [(twice,)] = layout.sql(CLAIMED_TWICE)
    failures = traffic.failed_after(killed)
    return {
        "rack_replicas": float(on_rack),
        "rack_recovery_s": recovered_s,
        "rack_claimed_twice": float(twice),
        "rack_gateway_failed": float(len(failures)),
        "rack_gateway_failed_after": float(len([t for t in failures if t > recovered])),
    }
