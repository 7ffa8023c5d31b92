"""Restarts and upgrades of the control plane are invisible to the fleet.

deploy/rolling-upgrade.sh, as an operator runs it, against this layout:
its migration (an additive one: a table, a column and an index on the
table every heartbeat writes) applied while the old processes run, then
each web process and each worker restarted in turn (SIGTERM, then the
process started again), each waited for before the next. Then the other
way a control plane restarts: every web process and worker killed with
SIGKILL at once and started again. Through both, no node may be marked
NotReady, no replica released or moved (the same replicas on the same
nodes, the real agents' engine the same process), and every node's
heartbeats must be stored again within 15 s."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime

import pytest

from llmgw.schedule import LEASE_S
from tests.reliability.checks import INTERVAL_S, settled_after_grace, spurious
from tests.reliability.cluster import ROOT, Cluster
from tests.reliability.figures import FULL, record
from tests.reliability.load import Load
from tests.reliability.restarts import Hearing, Operator

pytestmark = pytest.mark.slow

# "Heartbeats answered again within 15 s": of when they were due, while
# processes restart one at a time; of the processes being back, after all
# of them were killed at once (an agent's retries wait at most 10 s).
HEARD_AGAIN_S = 15.0
LIVE = (
    "SELECT r.id, array_agg(n.name ORDER BY n.name) FROM serving_replica r"
    " JOIN serving_shard s ON s.replica_id = r.id JOIN inventory_node n ON n.id = s.node_id"
    " WHERE r.state NOT IN ('lost', 'failed') GROUP BY r.id"
)
MIGRATED = (
    "SELECT count(*) FROM information_schema.columns"
    " WHERE table_name = 'inventory_node' AND column_name = 'upgrade_note'"
)


def live_replicas(cluster: Cluster) -> set[tuple[int, tuple[str, ...]]]:
    return {(rid, tuple(names)) for rid, names in cluster.sql(LIVE)}


def rolling_upgrade(cluster: Cluster, operator: Operator) -> subprocess.CompletedProcess[str]:
    """The script itself, its commands pointed at this layout's processes.
    Nothing to build: they run this checkout's code."""
    webs = " ".join(f"web{i + 1}={url}/healthz" for i, url in enumerate(cluster.urls))
    env = {
        **cluster.env,
        "BUILD": "true",
        "MIGRATE": "env DJANGO_SETTINGS_MODULE=tests.reliability.upgrade.settings"
        " python manage.py migrate --noinput",
        "RESTART": operator.command("/restart"),
        "WEBS": webs,
        "WORKERS": "worker1 worker2",
        "WORKER_READY": operator.command("/ready"),
    }
    return subprocess.run(
        ["bash", str(ROOT / "deploy/rolling-upgrade.sh")], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_rolling_upgrade_then_all_at_once(cluster: Cluster) -> None:
    before = set(cluster.marked_not_ready())
    replicas, engine = live_replicas(cluster), set(cluster.serving_tiny())
    assert replicas and engine
    with Hearing(cluster) as hearing, Operator(cluster) as operator:
        # API calls throughout, as a client behind a balancer makes them.
        with Load(cluster.urls, cluster.token) as load:
            started = time.monotonic()
            done = rolling_upgrade(cluster, operator)
            procedure_s = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        rolling_silence_s = hearing.longest_silence_s()
        # From each process's restart until every node was heard after it.
        restart_heard_s = max(hearing.heard_after_s(r.up_at) for r in operator.restarts)
        schedule_gap_s = hearing.longest_schedule_gap_s()

        for proc in (*cluster.webs, *cluster.workers):
            cluster.kill(proc)
        killed = time.monotonic()
        for i in (0, 1):
            cluster.start_web(i)
        back = datetime.now(UTC)
        down_s = time.monotonic() - killed
        for i in (0, 1):
            cluster.start_worker(i)
        heard_again_s = hearing.heard_after_s(back)
        if FULL:  # and the procedure once more on the processes just started
            done = rolling_upgrade(cluster, operator)
            assert done.returncode == 0, done.stdout + done.stderr
        census = settled_after_grace(cluster)
        restarts = operator.restarts
    marked = spurious(cluster, before)
    moved = replicas ^ live_replicas(cluster)
    errors = sum(n for status, n in load.errors().items())
    record(
        "rolling upgrade", procedure_s=procedure_s, restarts=len(restarts),
        slowest_stop_s=max(r.stop_s for r in restarts),
        killed_after_grace=[r.name for r in restarts if not r.ended_by_itself],
        heard_after_each_s=restart_heard_s, longest_node_silence_s=rolling_silence_s, longest_schedule_gap_s=schedule_gap_s,
        api_calls=len(load.samples), api_retried=load.retried,
        api_errors=errors, migrated=cluster.sql(MIGRATED)[0][0],
    )  # fmt: skip
    record(
        "control plane killed at once", down_s=down_s, heard_again_s=heard_again_s,
        spurious_not_ready=len(marked), replicas_moved=len(moved),
        engine_same=set(cluster.serving_tiny()) == engine, **census,
    )  # fmt: skip
    assert cluster.sql(MIGRATED)[0][0] == 1, "the script's migration did not run"
    assert [r.name for r in restarts[:4]] == ["web1", "web2", "worker1", "worker2"]
    # Each stopped within docker compose's grace (uvicorn cancels what is
    # left after 5 s; a worker finishes its task), none killed.
    assert all(r.ended_by_itself for r in restarts), restarts
    assert not marked, marked
    assert not moved, moved
    assert set(cluster.serving_tiny()) == engine
    assert not any(census.values()), census
    assert restart_heard_s <= HEARD_AGAIN_S, restart_heard_s
    assert rolling_silence_s <= INTERVAL_S + HEARD_AGAIN_S, rolling_silence_s
    assert heard_again_s <= HEARD_AGAIN_S, heard_again_s
    # A worker stopped cleanly gives the schedule's lease back: the other
    # takes it at its next renewal (a third of the 15 s lease) and sends
    # the staleness pass at once, not after the lease runs out as from a
    # killed one.
    assert schedule_gap_s < LEASE_S, schedule_gap_s
    assert not errors, (load.errors(), load.cuts)
