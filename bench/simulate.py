"""make bench-simulate: a simulated fleet joining an empty control plane, to steady state.

The production layout on this machine: two uvicorn web processes on
PostgreSQL and Redis, and `llmgw simulate --nodes N --interval I` as its
own process, its nodes all new (an empty database, no kept credentials).
Measured: the time from the simulator's start until every node is Ready
and heartbeating on its interval (its last heartbeat within 1.5 intervals),
with the CPU the simulator and the web processes spent getting there, then,
in steady state, the simulator's CPU in cores (psutil) over a window,
beside the web processes' and PostgreSQL's. Printed beside the targets:
steady state within a minute, at most one core, at 5,000 nodes every 10 s.

`--short` (10 nodes every 2 s, one web process, a 2 s window) is for the
tests: it measures nothing worth quoting, only that a fleet still joins;
either form exits non-zero when the fleet never became steady.

No Celery worker runs: the fabric sweeps a new fabric asks for wait in
Redis, as they would for a busy worker, and cost the web processes nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
    sys.exit("bench-simulate runs on PostgreSQL: set DATABASE_URL (make bench-simulate does)")

import django  # noqa: E402

django.setup()

from django.db import close_old_connections, connection  # noqa: E402

from bench.figures import report_unmeasured  # noqa: E402
from bench.fleet_measure import cpu_seconds  # noqa: E402
from bench.heartbeat import postgres_processes  # noqa: E402
from tests.servers import Server, start_uvicorn  # noqa: E402

PREFIX = "join"


def fleet_state(interval: float) -> tuple[int, int, int, int]:
    """(nodes, joined, registered, Ready and heartbeating on their interval)."""
    close_old_connections()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE credential_hash <> ''), "
            "count(registered_at), count(*) FILTER (WHERE state = 'Ready' "
            "AND last_heartbeat_at > now() - make_interval(secs => %s)) "
            "FROM inventory_node WHERE name LIKE %s",
            [interval * 1.5, f"{PREFIX}-%"],
        )
        row = cursor.fetchone()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def node_updates() -> int:
    close_old_connections()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'inventory_node'")
        (updates,) = cursor.fetchone()
    return int(updates)


def simulate(args: argparse.Namespace, urls: list[str], data_dir: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-c", "import sys; from llmgw.cli import main; sys.exit(main())",
        "simulate", "--nodes", str(args.nodes), "--interval", str(args.interval),
        "--prefix", PREFIX, "--nvl72-trays", "0", "--server", ",".join(urls),
    ]  # fmt: skip
    env = {**os.environ, "LLMGW_DATA_DIR": data_dir}
    log = open(Path(data_dir) / "simulate.log", "wb")  # noqa: SIM115 - the process keeps it
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_steady(
    args: argparse.Namespace, sim: subprocess.Popen[bytes], started: float
) -> float | None:
    """Seconds from the start until every node is Ready on its interval; None past the limit."""
    shown = 0.0
    while time.monotonic() - started < args.limit:
        if sim.poll() is not None:
            sys.exit(f"llmgw simulate ended with {sim.returncode}: see its log")
        nodes, joined, registered, ready = fleet_state(args.interval)
        elapsed = time.monotonic() - started
        if ready >= args.nodes:
            return elapsed
        if elapsed - shown >= 10:
            shown = elapsed
            print(
                f"  {elapsed:5.0f} s: {nodes} nodes, {joined} joined, {registered} registered, "
                f"{ready} Ready on their interval",
                flush=True,
            )
        time.sleep(1.0)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="simulated nodes, all new")
    parser.add_argument("--interval", type=float, default=10.0, help="each node's interval, s")
    parser.add_argument("--window", type=float, default=30.0, help="steady-state CPU window, s")
    parser.add_argument("--limit", type=float, default=900.0, help="give up after, s")
    parser.add_argument("--web", type=int, default=2, help="uvicorn web processes")
    parser.add_argument("--short", action="store_true", help="10 nodes: does it measure?")
    args = parser.parse_args()
    if args.short:
        args.nodes, args.interval, args.window, args.limit, args.web = 10, 2.0, 2.0, 60.0, 1

    if fleet_state(args.interval)[0]:
        sys.exit(f"the database already holds {PREFIX}-* nodes: start from an empty one")
    connection.close()
    env = {**os.environ, "DEBUG": "false"}
    servers: list[Server] = []
    sim = None
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as data_dir:
        try:
            for _ in range(args.web):
                servers.append(start_uvicorn(env=env))
            web = [psutil.Process(server.proc.pid) for server in servers]
            started = time.monotonic()
            sim = simulate(args, [server.url for server in servers], data_dir)
            proc = psutil.Process(sim.pid)
            steady = wait_steady(args, sim, started)
            postgres = postgres_processes()
            # The backends' CPU since they started, which was with the web
            # processes (a pool keeps its connections): those closed since
            # are left out, so this is at least what PostgreSQL spent.
            joining = (cpu_seconds([proc]), cpu_seconds(web), cpu_seconds(postgres))
            before = (cpu_seconds([proc]), cpu_seconds(web), cpu_seconds(postgres), node_updates())
            t0 = time.monotonic()
            time.sleep(args.window)
            window = time.monotonic() - t0
            after = (cpu_seconds([proc]), cpu_seconds(web), cpu_seconds(postgres), node_updates())
        finally:
            if sim is not None:
                sim.terminate()
                sim.wait(timeout=20)
            for server in servers:
                server.stop(timeout=20)
        report(args, steady, joining, window, before, after)
    sys.exit(report_unmeasured({"nodes steady": (0 if steady is None else args.nodes, 0)}))


def report(
    args: argparse.Namespace,
    steady: float | None,
    joining: tuple[float, float, float],
    window: float,
    before: tuple[float, float, float, int],
    after: tuple[float, float, float, int],
) -> None:
    sim, web, postgres, updates = (b - a for a, b in zip(before, after, strict=True))
    load = os.getloadavg()
    print(
        f"{args.nodes} new nodes every {args.interval:g} s against {args.web} uvicorn web "
        f"processes on PostgreSQL and Redis, {os.cpu_count()} cores (load average "
        f"{load[0]:.1f}, shared with others' work)"
    )
    took = f"{steady:.0f} s" if steady is not None else f"not within {args.limit:.0f} s"
    met = steady is not None and steady <= 60
    print(f"steady state (every node Ready on its interval): {took}   target 60 s: "
          f"{'met' if met else 'not met'}")  # fmt: skip
    print(
        f"CPU while joining: simulator {joining[0]:.1f} s, web processes {joining[1]:.1f} s "
        f"({joining[1] / args.nodes * 1000:.0f} ms a node), PostgreSQL at least "
        f"{joining[2]:.1f} s ({joining[2] / args.nodes * 1000:.0f} ms a node)"
    )
    cores = sim / window
    print(
        f"steady state, {window:.0f} s window: simulator {cores:.2f} cores ({sim:.1f} s CPU)   "
        f"target 1 core: {'met' if cores <= 1 else 'not met'}"
    )
    print(
        f"  web processes {web / window:.2f} cores, PostgreSQL {postgres / window:.2f} cores, "
        f"{updates / window:.0f} node-row updates/s (offered {args.nodes / args.interval:.0f})"
    )


if __name__ == "__main__":
    main()
