"""The production layout, on this machine, for the reliability scenarios:
two uvicorn web processes and two `llmgw worker` processes on a private
PostgreSQL and a private Redis, and simulated fleets (`llmgw simulate`)
whose agents are given both web URLs. Every process can be killed with
SIGKILL and started again; each writes its log under the cluster's folder,
which a scenario reads for what the control plane decided."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.reliability.agent import NAMES, RealAgent
from tests.reliability.agent import catalog as real_catalog
from tests.reliability.services import Postgres, Redis, wait_port
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NOT_READY_LOG = re.compile(r"node (\S+) missed \d+ heartbeats: NotReady")

SETUP = """
import django
django.setup()
from django.contrib.auth.models import User
from llmgw.accounts import roles
from llmgw.accounts.tokens import create_token
from llmgw.catalog import services as catalog
from llmgw.inventory import services as inventory
from llmgw.serving import keys
user = User.objects.create_user("admin", password="a-long-reliability-password")
roles.grant(user, roles.ADMIN)
catalog.apply_text(open({catalog!r}).read())
print(create_token(user, "reliability", None).secret)
print(keys.create_key("reliability", user, all_models=True).key)
for name in {nodes!r}:
    print(inventory.add_node(name, "reliability"))
"""


def ended(proc: subprocess.Popen[bytes] | None) -> bool:
    """Never started, or started and exited."""
    return proc is None or proc.poll() is not None


class Cluster:
    def __init__(self, root: Path, catalog: str, **env: str) -> None:
        self.root = root
        self.pg, self.redis = Postgres(), Redis(root / "redis")
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.agents = {name: RealAgent(root / name, name, root / "models") for name in NAMES}
        (root / "catalog.yaml").write_text(catalog + real_catalog(root / "models"))
        self.env = {
            **os.environ,
            "DATABASE_URL": self.pg.url,
            "REDIS_URL": self.redis.url,
            "LLMGW_DATA_DIR": str(root / "data"),
            "DJANGO_SECRET_KEY": "reliability-suite-secret-key-not-for-production",
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "llmgw.settings",
            **env,
        }
        self.web_ports = [free_port(), free_port()]
        self.webs: list[subprocess.Popen[bytes] | None] = [None, None]
        self.workers: list[subprocess.Popen[bytes] | None] = [None, None]
        self.fleets: dict[str, subprocess.Popen[bytes]] = {}
        self.fleet_sizes: dict[str, tuple[int, float]] = {}
        self.token = self.gateway_key = ""
        self.starts = 0

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.web_ports]

    def start(self) -> None:
        self.pg.start()
        self.redis.start()
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT, env=self.env, check=True,
        )  # fmt: skip
        code = SETUP.format(catalog=str(self.root / "catalog.yaml"), nodes=NAMES)
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=self.env, check=True,
            capture_output=True, text=True,
        )  # fmt: skip
        lines = done.stdout.strip().splitlines()[-2 - len(NAMES) :]
        self.token, self.gateway_key, *join_tokens = lines
        for i in (0, 1):
            self.start_web(i)
            self.start_worker(i)
        for agent, join_token in zip(self.agents.values(), join_tokens, strict=True):
            agent.configure(self.urls, join_token)
            self.start_agent(agent.name)

    def start_agent(self, name: str) -> None:
        self.starts += 1
        self.agents[name].start(self.env, self.logs / f"agent-{name}.log")

    def restore(self) -> bool:
        """Start again whatever process of the layout is not running (True
        if any was not): a scenario that failed before it brought back what
        it killed must not fail every scenario after it (one did: nine
        failed on its fleet)."""
        self.pg.resume_if_hung()
        down = 0
        for i, proc in enumerate(self.webs):
            if ended(proc):
                down += 1
                self.start_web(i)
        for i, proc in enumerate(self.workers):
            if ended(proc):
                down += 1
                self.start_worker(i)
        for prefix, proc in list(self.fleets.items()):
            if ended(proc):
                down += 1
                self.start_fleet(prefix, *self.fleet_sizes[prefix])
        for name, agent in self.agents.items():
            if ended(agent.proc):
                down += 1
                self.start_agent(name)
        return down > 0

    def apply(self, catalog: str) -> None:
        """`llmgw catalog apply`, as an operator changes what is held."""
        path = self.root / f"catalog-{self.starts}.yaml"
        path.write_text(catalog)
        subprocess.run(
            [str(BIN / "llmgw"), "catalog", "apply", str(path)], cwd=ROOT, env=self.env,
            check=True, capture_output=True,
        )  # fmt: skip

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        self.starts += 1
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child holds it
        try:
            return subprocess.Popen(
                args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()

    def start_web(self, i: int) -> None:
        self.webs[i] = self._spawn(
            f"web{i}",
            [sys.executable, "-m", "uvicorn", "llmgw.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.web_ports[i]), "--log-level", "warning",
             "--timeout-graceful-shutdown", "5"],  # as the Dockerfile's
        )  # fmt: skip
        wait_port(self.web_ports[i], 60)

    def start_worker(self, i: int) -> None:
        self.workers[i] = self._spawn(f"worker{i}", [str(BIN / "llmgw"), "worker"])

    def start_fleet(self, prefix: str, nodes: int, interval_s: float = 10.0) -> None:
        """`nodes` simulated agents in one process: killing it is their
        nodes' power going out together."""
        self.fleet_sizes[prefix] = (nodes, interval_s)
        self.fleets[prefix] = self._spawn(
            f"fleet-{prefix}",
            [str(BIN / "llmgw"), "simulate", "--server", ",".join(self.urls), "--nodes",
             str(nodes), "--interval", str(interval_s), "--prefix", prefix, "--nvl72-trays", "0"],
        )  # fmt: skip

    @staticmethod
    def kill(proc: subprocess.Popen[bytes] | None) -> None:
        """SIGKILL to the process and every child it started (Celery's pool)."""
        if proc is None or ended(proc):
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes] | None, grace_s: float) -> bool:
        """SIGTERM to the process alone, as `docker compose stop` sends its
        container's first process, then SIGKILL to whatever of its group
        is left after grace_s. True if it had ended by itself."""
        if proc is None or ended(proc):
            return True
        proc.terminate()
        try:
            proc.wait(grace_s)
            by_itself = True
        except subprocess.TimeoutExpired:
            by_itself = False
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)
        return by_itself

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()
        for proc in [*self.webs, *self.workers, *self.fleets.values()]:
            self.kill(proc)
        self.pg.resume_if_hung()
        self.pg.stop()
        self.pg.remove()
        self.redis.stop()

    # --- what the control plane holds ------------------------------------

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.pg.url, connect_timeout=5, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def wait_sql(self, query: str, want: Any, timeout_s: float, *params: Any) -> float:
        """Seconds until `query` returns `want` (a scalar); raises past timeout_s."""
        started = time.monotonic()
        got: Any = None
        while time.monotonic() - started < timeout_s:
            try:
                got = self.sql(query, *params)[0][0]
            except psycopg.OperationalError:
                got = "database unreachable"
            if got == want:
                return time.monotonic() - started
            time.sleep(0.5)
        raise AssertionError(f"{query!r} is {got!r}, not {want!r}, after {timeout_s} s")

    def backends(self) -> dict[str, int]:
        """The control plane's connections to PostgreSQL, by state."""
        return dict(
            self.sql(
                "SELECT coalesce(state, '?'), count(*) FROM pg_stat_activity"
                " WHERE datname = 'llmgw' AND pid <> pg_backend_pid() GROUP BY 1"
            )
        )

    def serving_tiny(self) -> list[tuple[str, int, str]]:
        """(node, pid, url) of each ready shard of the real agents' model."""
        return [
            tuple(row)  # type: ignore[misc]
            for row in self.sql(
                "SELECT n.name, s.pid, s.url FROM serving_shard s"
                " JOIN serving_replica r ON r.id = s.replica_id"
                " JOIN catalog_model m ON m.id = r.model_id JOIN inventory_node n"
                " ON n.id = s.node_id WHERE m.name = 'tiny' AND s.state = 'ready'"
                " AND r.state NOT IN ('lost', 'failed')"
            )
        ]

    def nodes_ready(self) -> int:
        return self.sql("SELECT count(*) FROM inventory_node WHERE state = 'Ready'")[0][0]

    def marked_not_ready(self) -> list[str]:
        """Every node a worker has marked NotReady since the cluster started."""
        names = []
        for log in self.logs.glob("worker*.log"):
            names += NOT_READY_LOG.findall(log.read_text(errors="replace"))
        return names

    def log_text(self, prefix: str) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs.glob(f"{prefix}*.log"))

    # --- the invariants every scenario ends on ---------------------------

    def census(self) -> dict[str, int]:
        """Duplicated and missing replicas (live ones against each held
        model's always_running), GPUs claimed twice among live replicas,
        claims still held by lost or failed replicas, and live shards left
        on NotReady nodes."""
        rows = self.sql(
            "SELECT m.always_running, count(r.id) FILTER (WHERE r.state NOT IN ('lost', 'failed'))"
            " FROM catalog_model m LEFT JOIN serving_replica r ON r.model_id = m.id"
            " WHERE m.always_running > 0 GROUP BY m.id, m.always_running"
        )
        shared = self.sql(
            "SELECT count(*) FROM (SELECT c.node_id, c.index FROM serving_gpuclaim c"
            " JOIN serving_shard s ON s.id = c.shard_id JOIN serving_replica r ON r.id = s.replica_id"
            " WHERE r.state NOT IN ('lost', 'failed') GROUP BY 1, 2 HAVING count(*) > 1) x"
        )[0][0]
        stale_claims = self.sql(
            "SELECT count(*) FROM serving_gpuclaim c JOIN serving_shard s ON s.id = c.shard_id"
            " JOIN serving_replica r ON r.id = s.replica_id WHERE r.state IN ('lost', 'failed')"
        )[0][0]
        stranded = self.sql(
            "SELECT count(*) FROM serving_shard s JOIN inventory_node n ON n.id = s.node_id"
            " JOIN serving_replica r ON r.id = s.replica_id"
            " WHERE n.state <> 'Ready' AND r.state NOT IN ('lost', 'failed')"
        )[0][0]
        named = {
            pid for (pid,) in self.sql(
                "SELECT s.pid FROM serving_shard s JOIN serving_replica r ON r.id = s.replica_id"
                " JOIN inventory_node n ON n.id = s.node_id WHERE n.name = ANY(%s)"
                " AND s.pid IS NOT NULL AND r.state NOT IN ('lost', 'failed')", list(NAMES),
            )
        }  # fmt: skip
        return {
            "orphans": len({p for a in self.agents.values() for p in a.engines()} - named),
            "duplicates": sum(max(0, live - want) for want, live in rows),
            "missing": sum(max(0, want - live) for want, live in rows),
            "shared_gpus": shared,
            "lost_claims": stale_claims,
            "stranded": stranded,
        }

    def settle(self, nodes: int, timeout_s: float) -> float:
        """Seconds until `nodes` nodes are Ready and every held model has
        exactly its replicas, each GPU claimed once."""
        started = time.monotonic()
        last: Any = None
        while time.monotonic() - started < timeout_s:
            try:
                last = (self.nodes_ready(), self.census())
                if last[0] == nodes and not any(last[1].values()):
                    return time.monotonic() - started
            except psycopg.OperationalError as exc:
                last = exc
            time.sleep(1)
        raise AssertionError(f"not settled after {timeout_s} s: {last}\n{self.unready()}")

    def unready(self) -> str:
        """The nodes not Ready and the last lines of the logs that say why
        (the fleets', the web processes', PostgreSQL's): what a failed
        settle reports, since CI keeps nothing else of the layout."""
        try:
            rows = self.sql(
                "SELECT name, state, last_heartbeat_at, registered_at, revoked_at"
                " FROM inventory_node WHERE state <> 'Ready' ORDER BY name"
            )
            lines = [f"not Ready: {row}" for row in rows]
        except psycopg.Error as exc:
            lines = [f"nodes not read: {exc}"]
        logs = [p for p in sorted(self.logs.glob("*.log")) if p.name.startswith(("fleet", "web"))]
        for path in [*logs, self.pg.root / "postgres.log"]:
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-15:]
                lines += [f"--- {path.name}"] + tail
        return "\n".join(lines)

    def replicas_on(self, prefix: str) -> int:
        return self.sql(
            "SELECT count(DISTINCT r.id) FROM serving_replica r JOIN serving_shard s"
            " ON s.replica_id = r.id JOIN inventory_node n ON n.id = s.node_id"
            " WHERE n.name LIKE %s AND r.state NOT IN ('lost', 'failed')",
            f"{prefix}-%",
        )[0][0]
