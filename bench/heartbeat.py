"""make bench-heartbeat: sustained heartbeats per second on PostgreSQL and Redis.

N simulated agents, each on its own keep-alive connection, post heartbeats
back to back to the control plane served by gunicorn (gthread workers, one
per core) for a fixed time. The same load is then sent to a bare WSGI app
under the same server (bench/peer_app.py), the ceiling for any Python
endpoint on this machine, and the ratio is printed. SQL statements per
heartbeat are counted twice: in-process with Django's query capture, and
on the server from PostgreSQL's own index-scan and update counters.

Target: 1,000 heartbeats/s (10,000 nodes every 10 s); at most 3 SQL
statements for a heartbeat that changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
    sys.exit("bench-heartbeat runs on PostgreSQL: set DATABASE_URL (make bench-heartbeat does)")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from llmgw.inventory import services  # noqa: E402
from llmgw.inventory.models import Node  # noqa: E402
from llmgw.simulator.fleet import make_fleet  # noqa: E402
from tests.servers import Server, free_port, start_server  # noqa: E402


def prepare(count: int) -> list[tuple[str, bytes, bytes]]:
    """Join `count` nodes and build each one's registration and heartbeat."""
    Node.objects.filter(name__startswith="bench-").delete()
    fleet = make_fleet(count, prefix="bench")
    prepared = []
    for sim in fleet:
        credential = services.join(sim.name, services.add_node(sim.name, "bench"))
        prepared.append(
            (
                credential,
                msgspec.json.encode(sim.registration(10)),
                msgspec.json.encode(sim.heartbeat()),
            )
        )
    return prepared


def count_statements(prepared: list[tuple[str, bytes, bytes]]) -> tuple[float, float]:
    client = Client()
    credential, registration, heartbeat = prepared[0]
    auth = {"HTTP_AUTHORIZATION": f"Node {credential}"}
    client.post("/api/agent/v1/register", registration, content_type="application/json", **auth)
    with CaptureQueriesContext(connection) as first:
        client.post("/api/agent/v1/heartbeat", heartbeat, content_type="application/json", **auth)
    with CaptureQueriesContext(connection) as same:
        client.post("/api/agent/v1/heartbeat", heartbeat, content_type="application/json", **auth)
    return len(same.captured_queries), len(first.captured_queries)


def table_counters() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT coalesce(idx_scan, 0) + coalesce(seq_scan, 0), n_tup_upd FROM pg_stat_user_tables "
            "WHERE relname = 'inventory_node'"
        )
        scans, updates = cursor.fetchone()
    return int(scans), int(updates)


async def agent(
    port: int, path: str, credential: str, body: bytes, until: float, lat: list[float]
) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Node {credential}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sent = 0
    while time.perf_counter() < until:
        start = time.perf_counter()
        writer.write(head + body)
        status = await reader.readline()
        length = 0
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"heartbeat refused: {status!r}")
        lat.append(time.perf_counter() - start)
        sent += 1
    writer.close()
    return sent


async def load(
    port: int, path: str, prepared: list[tuple[str, bytes, bytes]], seconds: float
) -> tuple[float, list[float]]:
    lat: list[float] = []
    until = time.perf_counter() + seconds
    start = time.perf_counter()
    counts = await asyncio.gather(*(agent(port, path, c, hb, until, lat) for c, _, hb in prepared))
    return sum(counts) / (time.perf_counter() - start), lat


def serve(app: str, workers: int, threads: int) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", app, "-b", f"127.0.0.1:{port}", "-k", "gthread"]
    argv += ["-w", str(workers), "--threads", str(threads), "--keep-alive", "30"]
    argv += ["--log-level", "warning"]
    argv += ["--chdir", str(ROOT / ("bench" if app.startswith("peer_app") else "."))]
    return start_server(argv, port, env={**os.environ, "DEBUG": "false"})


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=64, help="simulated agents posting at once")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    prepared = prepare(args.agents)
    unchanged, changed = count_statements(prepared)
    print(
        f"SQL statements per heartbeat: {unchanged} when nothing but measurements changed, "
        f"{changed} when filesystems or weights changed (Django query capture)"
    )

    server = serve("llmgw.wsgi:application", args.workers, args.threads)
    port = server.port
    try:
        import httpx

        for credential, registration, _ in prepared:
            httpx.post(
                f"http://127.0.0.1:{port}/api/agent/v1/register",
                content=registration,
                headers={"Authorization": f"Node {credential}", "Content-Type": "application/json"},
            )
        asyncio.run(load(port, "/api/agent/v1/heartbeat", prepared, 2.0))  # warm up, first reports
        scans0, updates0 = table_counters()
        rate, lat = asyncio.run(load(port, "/api/agent/v1/heartbeat", prepared, args.seconds))
        scans1, updates1 = table_counters()
    finally:
        server.stop(timeout=20)
    beats = len(lat)
    with serve("peer_app:application", args.workers, args.threads) as peer:
        peer_rate, peer_lat = asyncio.run(load(peer.port, "/", prepared, args.seconds))

    print(
        f"agents {args.agents}, gunicorn gthread {args.workers} workers x {args.threads} threads, "
        f"{args.seconds:.0f} s, {os.cpu_count()} cores shared with the load generator"
    )
    print(
        f"llmgw heartbeats/s     {rate:8.0f}   p50 {percentile(lat, 50) * 1e3:6.1f} ms   "
        f"p99 {percentile(lat, 99) * 1e3:6.1f} ms   ({beats} heartbeats)"
    )
    print(
        f"peer (bare WSGI) req/s {peer_rate:8.0f}   p50 {percentile(peer_lat, 50) * 1e3:6.1f} ms   "
        f"p99 {percentile(peer_lat, 99) * 1e3:6.1f} ms"
    )
    print(f"ratio llmgw / bare WSGI: {rate / peer_rate:.2f}")
    print(
        f"server-side, per heartbeat: {(scans1 - scans0) / beats:.2f} node-table scans, "
        f"{(updates1 - updates0) / beats:.2f} node-row updates (PostgreSQL counters)"
    )
    print(
        f"target 1000/s: {'met' if rate >= 1000 else 'not met'}; "
        f"10 s interval supports {rate * 10:,.0f} nodes at this rate"
    )
    Node.objects.filter(name__startswith="bench-").delete()


if __name__ == "__main__":
    main()
