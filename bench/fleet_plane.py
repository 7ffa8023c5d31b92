"""The control plane as production runs it, for `make bench-fleet`: two
uvicorn web processes (or as many as asked) and two `llmgw worker` processes on a private
PostgreSQL and a private Redis (the reliability suite's, on free ports in
a folder of their own), and simulated fleets from `llmgw simulate`, each
a subprocess given both web URLs as real agents are."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.fleet_measure import Plane, Probe, probes_for
from tests.reliability.services import Postgres, Redis, wait_port
from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
USER, PASSWORD = "bench", "bench-fleet-password"
PROBES = 64
NOT_READY_LOG = re.compile(r"node (\S+) missed \d+ heartbeats: NotReady")
FLEET_LATE_LOG = re.compile(r"simulator: its loop ran up to ([\d.]+) s late")
# The timings the events' targets are reckoned from, as this layout runs them.
TIMINGS = """
import django
django.setup()
from django.conf import settings
schedule = settings.CELERY_BEAT_SCHEDULE
print(settings.MISSED_HEARTBEATS_NOT_READY, schedule["mark-missed-heartbeats"]["schedule"],
      schedule["reconcile-held-models"]["schedule"])
"""

# Run in the layout's environment once it is migrated: the operator, their
# gateway key and their token, the example catalog, and the probe nodes' credentials.
SETUP = """
import django
django.setup()
from pathlib import Path
from django.contrib.auth.models import User
from llmgw.accounts import roles
from llmgw.accounts.tokens import create_token
from llmgw.catalog import services as catalog
from llmgw.inventory import services as inventory
from llmgw.serving.keys import create_key
from llmgw.simulator.fleet import make_fleet
user = User.objects.create_user({user!r}, password={password!r})
roles.grant(user, roles.ADMIN)
catalog.apply_file(Path({catalog!r}))
print(create_key("bench-fleet", user, all_models=True).key)
print(create_token(user, "bench-fleet", None).secret)
for sim in make_fleet({probes}, prefix="probe"):
    print(inventory.join(sim.name, inventory.add_node(sim.name, "bench")))
"""


class Layout:
    """`webs` web processes and two workers; `catalog`: the catalog's text."""

    def __init__(self, root: Path, catalog: str, webs: int = 2) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pg, self.redis = Postgres(), Redis(root / "redis")
        self.env = {
            **os.environ,
            "DATABASE_URL": self.pg.url,
            "REDIS_URL": self.redis.url,
            "LLMGW_DATA_DIR": str(root / "data"),
            "LLMGW_STATIC_ROOT": str(root / "static"),
            "DJANGO_SECRET_KEY": "bench-fleet-secret-key-not-for-production",
            "DJANGO_SETTINGS_MODULE": "llmgw.settings",
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
        self.catalog = catalog
        self.ports = [free_port() for _ in range(webs)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, list[str]] = {}
        self.token = self.gateway_key = ""
        self.credentials: list[str] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def _run(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            what = "python -c" if args[0] == "-c" else " ".join(args[:2])
            raise RuntimeError(f"{what} failed: {done.stderr[-2000:]}")
        return done.stdout

    def _spawn(self, name: str, args: list[str]) -> None:
        self.commands[name] = args
        with open(self.logs / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def start(self) -> None:
        self.pg.start()
        self.redis.start()
        self._run("manage.py", "migrate", "--noinput", "-v0")
        self._run("manage.py", "collectstatic", "--noinput", "-v0")
        catalog = self.root / "catalog.yaml"
        catalog.write_text(self.catalog)
        setup = SETUP.format(user=USER, password=PASSWORD, catalog=str(catalog), probes=PROBES)
        lines = self._run("-c", setup).split()
        self.gateway_key, self.token = lines[-2 - PROBES], lines[-1 - PROBES]
        self.credentials = lines[-PROBES:]
        for i, port in enumerate(self.ports):
            self._spawn(
                f"web{i}",
                [sys.executable, "-m", "uvicorn", "llmgw.asgi:application", "--host",
                 "127.0.0.1", "--port", str(port), "--log-level", "warning",
                 "--timeout-graceful-shutdown", "5"],  # as the Dockerfile's
            )  # fmt: skip
        for i in range(2):
            self._spawn(f"worker{i}", [str(BIN / "llmgw"), "worker", "--concurrency", "2"])
        self.wait_webs(90)

    def wait_webs(self, timeout_s: float) -> None:
        for port in self.ports:
            wait_port(port, timeout_s)

    def timings(self) -> tuple[int, float, float]:
        """Missed heartbeats before NotReady, and the seconds between
        staleness passes and between reconciler ticks."""
        missed, staleness, reconcile = self._run("-c", TIMINGS).split()
        return int(missed), float(staleness), float(reconcile)

    def migrate(self) -> None:
        self._run("manage.py", "migrate", "--noinput", "-v0")

    def simulate(self, prefix: str, nodes: int, interval_s: float) -> None:
        """`nodes` more simulated nodes in a process of their own, their
        shards taken to ready and answered (so a replica placed on them is
        routed to, as on real nodes)."""
        self._spawn(
            f"fleet-{prefix}",
            [str(BIN / "llmgw"), "simulate", "--server", ",".join(self.urls), "--nodes",
             str(nodes), "--interval", str(interval_s), "--prefix", prefix, "--nvl72-trays", "0",
             "--serve-shards"],
        )  # fmt: skip

    def stop(self, name: str, sig: int = signal.SIGKILL, grace_s: float = 60.0) -> bool:
        """Signal one process (and its children) and wait for it to end; as
        a supervisor does, SIGKILL once `grace_s` has passed. Whether it
        ended of itself."""
        proc = self.procs[name]
        for signal_ in (sig, signal.SIGKILL):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal_)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(grace_s)
                return signal_ == sig
            except subprocess.TimeoutExpired:
                continue
        proc.wait(30)
        return False

    def restart(self, name: str) -> None:
        """Start a stopped process again, as its supervisor would."""
        self._spawn(name, self.commands[name])

    def sql(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with psycopg.connect(self.pg.url, connect_timeout=5, autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())

    def marked_not_ready(self) -> list[str]:
        """Every node a worker has logged NotReady since the layout started."""
        names = []
        for log in self.logs.glob("worker*.log"):
            names += NOT_READY_LOG.findall(log.read_text(errors="replace"))
        return names

    def fleet_late(self) -> list[float]:
        """How late the simulated fleets' own event loops ran in each of
        their watch windows that said so (past LAG_S, or with nodes held
        up). A node whose heartbeat went unanswered while its loop ran
        seconds late was silent for the simulator's sake, not the control
        plane's (run at a higher priority, it ran as late: its own work)."""
        late: list[float] = []
        for log in self.logs.glob("fleet-*.log"):
            late += map(float, FLEET_LATE_LOG.findall(log.read_text(errors="replace")))
        return late

    def ready(self) -> int:
        with psycopg.connect(self.pg.url, connect_timeout=5, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM inventory_node WHERE state = 'Ready'"
                " AND last_heartbeat_at > now() - interval '60 seconds'"
                " AND name NOT LIKE %s",
                ("probe-%",),
            ).fetchone()
        return int(row[0]) if row else 0

    def beating(self, seconds: float) -> int:
        """Simulated nodes whose last heartbeat was stored in the last `seconds`."""
        with psycopg.connect(self.pg.url, connect_timeout=5, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM inventory_node WHERE name NOT LIKE %s"
                " AND last_heartbeat_at > now() - make_interval(secs => %s)",
                ("probe-%", seconds),
            ).fetchone()
        return int(row[0]) if row else 0

    def wait_ready(self, nodes: int, timeout_s: float) -> float:
        """Seconds until `nodes` simulated nodes are Ready and beating."""
        started = time.monotonic()
        while (count := self.ready()) < nodes:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode}: see {self.logs}")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"{count} of {nodes} nodes Ready after {timeout_s:.0f} s")
            time.sleep(2)
        return time.monotonic() - started

    def control_plane(self) -> list[int]:
        """The web and worker processes (psutil adds their children)."""
        return [p.pid for name, p in self.procs.items() if name.startswith(("web", "worker"))]

    def web(self) -> list[int]:
        return [p.pid for name, p in self.procs.items() if name.startswith("web")]

    def plane(self) -> Plane:
        return Plane(
            self.urls, self.token, USER, PASSWORD, self.control_plane, dict(self.env), self.web,
            self.pg.pids, self.redis.url,
        )  # fmt: skip

    def probes(self, interval_s: float) -> list[Probe]:
        from llmgw.simulator.fleet import make_fleet

        sims = make_fleet(PROBES, prefix="probe")
        return probes_for(list(zip(sims, self.credentials, strict=True)), interval_s)

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of each process's log, for a run that failed."""
        out = []
        for log in sorted(self.logs.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                proc.wait(30)
        self.pg.stop()
        self.pg.remove()
        self.redis.stop()
