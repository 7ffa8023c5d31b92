"""What deploy/rolling-upgrade.sh needs of the reliability cluster, and
what a restart is measured by.

Operator: the script's RESTART and WORKER_READY, as HTTP calls into the
test that owns the cluster's processes (`curl ... -d web1`). A restart
stops the named process as `docker compose up --force-recreate` does
(SIGTERM, then SIGKILL after the grace) and starts it again.

Hearing: every node's last stored heartbeat, read twice a second, so a
scenario can say how long any node went unheard and how soon after a
moment every node was heard again; and the staleness passes, so it can
say how long the periodic schedule stopped."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg

from tests.reliability.cluster import Cluster

# docker compose's default stop grace (web1, web2; the workers are given 60 s).
STOP_GRACE_S = 10.0
PASSED = "SELECT max(last_pass_at) FROM inventory_stalenesspass"


@dataclass
class Restart:
    name: str
    stop_s: float  # SIGTERM until the process had ended
    ended_by_itself: bool  # False: it was killed after the grace
    up_at: datetime  # the new process started (a web: its port open)


@dataclass
class Operator:
    cluster: Cluster
    restarts: list[Restart] = field(default_factory=list)
    _log_at: dict[str, int] = field(default_factory=dict)

    def __enter__(self) -> Operator:
        operator = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                name = self.rfile.read(int(self.headers["Content-Length"])).decode()
                try:
                    code = operator.call(self.path, name)
                except Exception as exc:  # noqa: BLE001 - the script reads the status
                    code, name = 500, f"{name}: {exc}"
                self.send_response(code)
                self.end_headers()
                self.wfile.write(f"{name}\n".encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def command(self, path: str) -> str:
        """What the script runs, with the process's name appended."""
        return f"curl -fsS --max-time 180 http://127.0.0.1:{self.server.server_port}{path} -d"

    def call(self, path: str, name: str) -> int:
        kind, i = name.rstrip("12"), int(name[-1]) - 1
        if kind not in ("web", "worker") or i not in (0, 1):
            return 404
        if path == "/restart":
            self.restart(kind, i, name)
            return 200
        if path == "/ready" and kind == "worker":
            return 200 if self.worker_ready(name, i) else 503
        return 404

    def restart(self, kind: str, i: int, name: str) -> None:
        procs = self.cluster.webs if kind == "web" else self.cluster.workers
        started = time.monotonic()
        ended = self.cluster.stop(procs[i], STOP_GRACE_S if kind == "web" else 60.0)
        stop_s = time.monotonic() - started
        if kind == "web":
            self.cluster.start_web(i)
        else:
            self._log_at[name] = self._log(i).stat().st_size
            self.cluster.start_worker(i)
        self.restarts.append(Restart(name, stop_s, ended, datetime.now(UTC)))

    def _log(self, i: int) -> Path:
        return self.cluster.logs / f"worker{i}.log"

    def worker_ready(self, name: str, i: int) -> bool:
        """Celery logs `celery@HOST ready.` once it consumes tasks."""
        with self._log(i).open("rb") as log:
            log.seek(self._log_at.get(name, 0))
            return b" ready." in log.read()


class Hearing:
    """Each node's stored heartbeats, as last_heartbeat_at moves."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.beats: dict[str, list[datetime]] = {}
        self.passes: list[datetime] = []  # staleness passes: the periodic schedule
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Hearing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.cluster.pg.url, connect_timeout=5, autocommit=True) as c:
                    while not self._stop.wait(0.5):
                        rows = c.execute("SELECT name, last_heartbeat_at FROM inventory_node")
                        for name, at in rows.fetchall():
                            seen = self.beats.setdefault(name, [])
                            if at is not None and (not seen or at > seen[-1]):
                                seen.append(at)
                        row = c.execute(PASSED).fetchone()
                        if row and row[0] and (not self.passes or row[0] > self.passes[-1]):
                            self.passes.append(row[0])
            except psycopg.OperationalError:
                time.sleep(0.5)

    def _seen(self) -> list[list[datetime]]:
        return [list(beats) for beats in list(self.beats.values())]

    def longest_silence_s(self) -> float:
        """The longest any node went between two stored heartbeats."""
        gaps = [b - a for beats in self._seen() for a, b in itertools.pairwise(beats)]
        return max(gaps, default=timedelta()).total_seconds()

    def longest_schedule_gap_s(self) -> float:
        """The longest between two staleness passes (sent every 5 s by
        whichever worker holds the schedule's lease)."""
        gaps = [b - a for a, b in itertools.pairwise(list(self.passes))]
        return max(gaps, default=timedelta()).total_seconds()

    def heard_after_s(self, moment: datetime, timeout_s: float = 60) -> float:
        """Seconds from `moment` until every node had a heartbeat stored after it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen = self._seen()
            firsts = [next((at for at in beats if at > moment), None) for beats in seen]
            if seen and None not in firsts:
                return max((at - moment).total_seconds() for at in firsts if at is not None)
            time.sleep(0.5)
        raise AssertionError(f"some node was not heard within {timeout_s} s of {moment}")
