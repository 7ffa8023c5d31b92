"""The control plane's own outages are not the fleet's. PostgreSQL is
stopped, then every web and worker process is killed and started again;
meanwhile no agent stops. From the moment the control plane answers until
a node's full grace and two staleness passes later, every surface is read
every second: the API's list, its NotReady filter and its summary on both
web processes, the console, the metrics, and the stored state that routing
and the reconciler follow. None may show a node NotReady, no worker may
mark one, and no replica may move."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.reliability.checks import GRACE_S, MARGIN_S, STALENESS_EVERY_S, spurious
from tests.reliability.cluster import Cluster
from tests.reliability.conftest import NODES
from tests.reliability.figures import record, seconds

pytestmark = pytest.mark.slow

WATCH_S = GRACE_S + 2 * STALENESS_EVERY_S + MARGIN_S / 2
PASSWORD = "a-long-reliability-password"  # tests/reliability/cluster.py's SETUP
LIVE = (
    "SELECT r.id, s.node_id FROM serving_replica r JOIN serving_shard s ON s.replica_id = r.id"
    " WHERE r.state NOT IN ('lost', 'failed')"
)


class Surfaces:
    """Each surface's count of NotReady nodes; None where it did not answer."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.api = httpx.Client(headers={"Authorization": f"Token {cluster.token}"}, timeout=10)
        self.console = httpx.Client(timeout=10)
        self.logged_in = False

    def close(self) -> None:
        self.api.close()
        self.console.close()

    def _login(self, url: str) -> None:
        self.console.get(f"{url}/login/")
        form = {
            "username": "admin",
            "password": PASSWORD,
            "csrfmiddlewaretoken": self.console.cookies["csrftoken"],
        }
        r = self.console.post(f"{url}/login/", data=form)
        assert r.status_code == 302, (r.status_code, r.text[:300])
        self.logged_in = True

    def _read(self, url: str) -> dict[str, Any]:
        nodes = self.api.get(f"{url}/api/v1/nodes/", params={"limit": 1000}).json()["results"]
        summary = self.api.get(f"{url}/api/v1/nodes/summary/").json()
        metrics = self.api.get(f"{url}/metrics/nodes").text.splitlines()
        if not self.logged_in:
            self._login(url)
        gpus = self.console.get(f"{url}/console/api/gpus").json()["nodes"]
        return {
            "listed": len(nodes),
            "api": sum(n["state"] != "Ready" for n in nodes),
            "filter": self.api.get(f"{url}/api/v1/nodes/?state=NotReady").json()["count"],
            "summary": summary["not_ready"],
            "metrics": sum(
                line.startswith("llmgw_node_up{") and not line.endswith(" 1.0") for line in metrics
            ),
            "console": sum(n["state"] != "Ready" for n in gpus),
        }

    def read(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for i, url in enumerate(self.cluster.urls):
            try:
                got = self._read(url)
            except (httpx.HTTPError, ValueError, KeyError, AssertionError):
                got = None  # not answering yet (503, refused, mid-start)
            if got is not None:
                assert got.pop("listed") == NODES, got
            for name in ("api", "filter", "summary", "metrics", "console"):
                out[f"{name}{i}"] = None if got is None else got[name]
        try:
            out["stored"] = self.cluster.sql(
                "SELECT count(*) FROM inventory_node WHERE state <> 'Ready'"
            )[0][0]
        except Exception:
            out["stored"] = None
        return out


def watch(cluster: Cluster, surfaces: Surfaces) -> tuple[dict[str, int], dict[str, int]]:
    """From the first answer for WATCH_S: per surface, how many reads
    answered and the most NotReady nodes any of them showed."""
    answered: dict[str, int] = {}
    worst: dict[str, int] = {}
    first: float | None = None
    started = time.monotonic()
    while first is None or time.monotonic() - first < WATCH_S:
        assert time.monotonic() - started < 180, f"no surface answered in 180 s: {answered}"
        for name, count in surfaces.read().items():
            if count is None:
                continue
            if first is None and not name.startswith("stored"):
                first = time.monotonic()
            answered[name] = answered.get(name, 0) + 1
            worst[name] = max(worst.get(name, 0), count)
        time.sleep(1)
    return answered, worst


def _outage(cluster: Cluster, scenario: str, cut: Any) -> None:
    cluster.settle(NODES, 120)
    before_marked = set(cluster.marked_not_ready())
    before = set(cluster.sql(LIVE))
    surfaces = Surfaces(cluster)
    try:
        down_s = cut()
        answered, worst = watch(cluster, surfaces)
    finally:
        surfaces.close()
    marked = spurious(cluster, before_marked)
    after = set(cluster.sql(LIVE))
    moved = len(before ^ after)
    record(
        scenario, down_s=down_s, reads=min(answered.values(), default=0),
        worst_not_ready=max(worst.values(), default=0), spurious_not_ready=len(marked),
        replicas_moved=moved,
    )  # fmt: skip
    assert len(answered) == 11 and min(answered.values()) >= 5, answered
    assert not any(worst.values()), worst
    assert not marked, marked
    assert moved == 0, (sorted(before - after), sorted(after - before))


def test_a_database_outage_marks_no_node_not_ready(cluster: Cluster) -> None:
    def cut() -> float:
        down = seconds(45, 20)
        cluster.pg.stop()
        try:
            time.sleep(down)
        finally:
            cluster.pg.start()
        return down

    _outage(cluster, "postgres stopped: readiness", cut)


def test_a_restart_of_every_web_and_worker_marks_no_node_not_ready(cluster: Cluster) -> None:
    def cut() -> float:
        down = seconds(30, 15)
        for proc in (*cluster.webs, *cluster.workers):
            cluster.kill(proc)
        time.sleep(down)
        for i in (0, 1):
            cluster.start_web(i)
            cluster.start_worker(i)
        return down

    _outage(cluster, "every web and worker killed: readiness", cut)
