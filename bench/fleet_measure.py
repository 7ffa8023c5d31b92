"""What `make bench-fleet` measures, each through the path its user takes:
agents' heartbeats on the agent API, placements and explain on the REST
API with an operator's token, the /metrics targets as Prometheus scrapes
them, `llmgw ctl nodes` as a command, the cluster page in Chromium, and
the control plane's processes as the kernel counts them (psutil).

Each function takes a running control plane (`Plane`) and knows nothing of
how it was started, so tests/bench/test_fleet_measure.py runs them on a
tiny fleet and the benchmark cannot rot unseen.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.figures import percentile
from llmgw.cli.ctl_models import EXPLAIN_NODES

ROOT = Path(__file__).resolve().parent.parent
AGENT_API = "/api/agent/v1"
PAINTED = "performance.getEntriesByName('first-contentful-paint').length > 0"
FIRST_PAINT = "performance.getEntriesByName('first-contentful-paint')[0].startTime"


@dataclass
class Plane:
    """A running control plane: where it answers, who may use it, and the
    processes it runs as (their children are counted too)."""

    urls: list[str]
    token: str
    user: str
    password: str
    pids: Callable[[], list[int]]
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    # The web processes alone (what answers a scrape); None: all of pids.
    web_pids: Callable[[], list[int]] | None = None
    # The database's processes, when it is the control plane's own.
    database_pids: Callable[[], list[int]] = lambda: []
    # Its Redis, when the control plane's own ("": not counted).
    redis_url: str = ""

    @property
    def url(self) -> str:
        return self.urls[0]

    def api(self, url: str | None = None) -> httpx.Client:
        """A client of one web process: the first, or `url`."""
        return httpx.Client(
            base_url=url or self.url, headers={"Authorization": f"Token {self.token}"}, timeout=120
        )


@dataclass
class Probe:
    """A node of the benchmark's own: its credential, its registration and
    a few heartbeats to send in turn (as a node's telemetry changes)."""

    name: str
    credential: str
    registration: bytes
    beats: list[bytes]


# --- processes --------------------------------------------------------------


def processes(pids: Callable[[], list[int]]) -> list[psutil.Process]:
    """These processes and all their children."""
    found: dict[int, psutil.Process] = {}
    for pid in pids():
        try:
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                found[p.pid] = p
        except psutil.Error:
            continue
    return list(found.values())


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def footprint(plane: Plane, seconds: float) -> dict[str, float]:
    """CPU cores the control plane uses (CPU seconds per second over
    `seconds`) and its resident memory, over every process it runs; and
    the cores its database uses."""
    procs, database = processes(plane.pids), processes(plane.database_pids)
    before, started = cpu_seconds(procs), time.monotonic()
    database_before = cpu_seconds(database)
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    cores = (cpu_seconds(procs) - before) / elapsed
    database_cores = (cpu_seconds(database) - database_before) / elapsed
    rss = web_rss = 0
    web = {p.pid for p in processes(plane.web_pids or plane.pids)}
    for proc in procs:
        try:
            used = proc.memory_info().rss
        except psutil.Error:
            continue
        rss += used
        web_rss += used if proc.pid in web else 0
    return {
        "cores": cores,
        "rss_bytes": float(rss),
        "web_rss_bytes": float(web_rss),
        "processes": float(len(procs)),
        "database_cores": database_cores,
    }


@dataclass(frozen=True)
class Reading:
    """CPU seconds so far of the web processes, the workers and the
    database, and the commands Redis has processed: two readings give what
    a stretch of work cost each part."""

    at: float
    web: float
    workers: float
    database: float
    redis: float

    def cost(self, later: Reading, units: float, idle: Reading | None = None) -> dict[str, float]:
        """What each of `units` cost between this reading and `later`: web
        and worker CPU ms, database CPU ms, Redis commands. `idle`: a span
        of the same processes at rest (a Reading of the differences over a
        second), taken off first. Where that leaves nothing, the work cost
        less than the rest of the fleet's own varied meanwhile: not
        measured (NaN, shown "-"), never a cost of zero."""
        wall = later.at - self.at
        out = {}
        for part in ("web", "workers", "database", "redis"):
            spent = getattr(later, part) - getattr(self, part)
            if idle is not None:
                spent -= getattr(idle, part) * wall
                if spent <= 0:
                    out[part] = math.nan
                    continue
            out[part] = max(0.0, spent) / units * (1 if part == "redis" else 1e3)
        return out

    def rate(self, later: Reading) -> Reading:
        """The differences per second between this reading and `later`."""
        wall = later.at - self.at
        return Reading(
            1.0, (later.web - self.web) / wall, (later.workers - self.workers) / wall,
            (later.database - self.database) / wall, (later.redis - self.redis) / wall,
        )  # fmt: skip


def read(plane: Plane) -> Reading:
    web = processes(plane.web_pids or plane.pids)
    webs = {p.pid for p in web}
    workers = [p for p in processes(plane.pids) if p.pid not in webs]
    commands = 0.0
    if plane.redis_url:
        import redis

        with redis.Redis.from_url(plane.redis_url) as client:
            commands = float(client.info("stats")["total_commands_processed"])
    return Reading(
        time.monotonic(), cpu_seconds(web), cpu_seconds(workers),
        cpu_seconds(processes(plane.database_pids)), commands,
    )  # fmt: skip


# --- heartbeats -------------------------------------------------------------


async def _register(client: httpx.AsyncClient, url: str, probe: Probe) -> None:
    """Register, then send one heartbeat untimed: a node's first heartbeat
    stores every section (cards, ports, filesystems), once in its life."""
    headers = {"Authorization": f"Node {probe.credential}", "Content-Type": "application/json"}
    for path, body in (("/register", probe.registration), ("/heartbeat", probe.beats[0])):
        answer = await client.post(url + AGENT_API + path, content=body, headers=headers)
        answer.raise_for_status()


async def _beat(
    urls: list[str], probes: list[Probe], seconds: float, concurrency: int
) -> tuple[list[float], int]:
    latencies: list[float] = []
    failed = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        for i, probe in enumerate(probes):
            await _register(client, urls[i % len(urls)], probe)
        deadline = time.monotonic() + seconds

        async def worker(w: int) -> None:
            nonlocal failed
            n = w
            while time.monotonic() < deadline:
                probe = probes[n % len(probes)]
                body = probe.beats[(n // len(probes)) % len(probe.beats)]
                headers = {
                    "Authorization": f"Node {probe.credential}",
                    "Content-Type": "application/json",
                }
                started = time.perf_counter()
                try:
                    answer = await client.post(
                        urls[n % len(urls)] + AGENT_API + "/heartbeat",
                        content=body,
                        headers=headers,
                    )
                    ok = answer.status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - started)
                else:
                    failed += 1
                n += concurrency

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return latencies, failed


def heartbeats(
    plane: Plane, probes: list[Probe], seconds: float = 10.0, concurrency: int = 32
) -> dict[str, float]:
    """Heartbeats the control plane answers per second on top of its fleet's
    own, from `concurrency` agents posting back to back over both web
    processes, and the time from a heartbeat's send to its answer."""
    started = time.monotonic()
    latencies, failed = asyncio.run(_beat(plane.urls, probes, seconds, concurrency))
    wall = time.monotonic() - started
    if not latencies:
        raise RuntimeError(f"no heartbeat answered in {seconds} s ({failed} failed)")
    return {
        "rate": len(latencies) / min(wall, seconds),
        "p50_s": statistics.median(latencies),
        "p99_s": percentile(latencies, 0.99),
        "failed": float(failed),
        "sent": float(len(latencies) + failed),
    }


# --- placement and explain --------------------------------------------------


def first_looks(plane: Plane, model: str) -> float:
    """Seconds until every web process has answered one explain, all asked
    at once: a process whose warm fleet went cold (it was idle, or the
    fleet changed whole, as it does while nodes join and their fabrics are
    mapped again) reads the whole fleet at its first look. The placements
    measured after it are the steady rate; this is what the first caller
    after such a change waits."""

    def look(url: str) -> None:
        with plane.api(url) as api:
            api.get(f"/api/v1/models/{model}/explain", params={"nodes": "1"}).raise_for_status()

    started = time.perf_counter()
    with ThreadPoolExecutor(len(plane.urls)) as pool:
        list(pool.map(look, plane.urls))
    return time.perf_counter() - started


def placements(plane: Plane, model: str, count: int, concurrency: int = 8) -> dict[str, float]:
    """`count` placements of one replica each through POST
    /api/v1/models/{model}/place, `concurrency` at a time: committed ones
    per second of the whole run, and each request's time.

    Each of the `concurrency` callers keeps one client, as a program that
    places keeps its session, to one web process, the callers spread over
    them as a balancer in front of them spreads its clients (all of them
    sent to the first, one process placed while the others idled). A
    client a call cost this process 22 ms of CPU each (httpx loads the CA
    bundle into a new TLS context even for plain HTTP): on two busy cores
    the benchmark's own clients, not the control plane, then set the
    pace, at about 20 calls a second."""
    local = threading.local()
    clients: list[httpx.Client] = []
    lock = threading.Lock()

    def place(_: int) -> tuple[int, float]:
        api = getattr(local, "api", None)
        if api is None:
            with lock:
                api = local.api = plane.api(plane.urls[len(clients) % len(plane.urls)])
                clients.append(api)
        started = time.perf_counter()
        try:
            code = api.post(f"/api/v1/models/{model}/place/").status_code
        except httpx.HTTPError:
            code = 0  # no answer at all
        return code, time.perf_counter() - started

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(place, range(count)))
    finally:
        for api in clients:
            api.close()
    wall = time.monotonic() - started
    placed = [s for code, s in results if code == 201]
    refused = sum(1 for code, _ in results if code == 409)
    if refused + len(placed) == 0:
        codes = sorted({code for code, _ in results})
        raise RuntimeError(f"POST /api/v1/models/{model}/place/ answered only {codes}")
    return {
        "rate": len(placed) / wall,
        "p50_s": statistics.median(placed) if placed else float("nan"),
        "placed": float(len(placed)),
        "refused": float(refused),
        # Anything but placed (201) or refused with reasons (409): a fault.
        "failed": float(len(results) - len(placed) - refused),
    }


def explain(plane: Plane, model: str, runs: int = 3) -> float:
    """Median seconds of GET /api/v1/models/{model}/explain as `llmgw ctl
    explain` asks for it."""
    times = []
    with plane.api() as api:
        for _ in range(runs):
            started = time.perf_counter()
            answer = api.get(
                f"/api/v1/models/{model}/explain", params={"nodes": str(EXPLAIN_NODES)}
            )
            times.append(time.perf_counter() - started)
            answer.raise_for_status()
    return statistics.median(times)


# --- metrics ----------------------------------------------------------------


def production_shards() -> int:
    """How many node shards deploy/prometheus/prometheus.yml scrapes, after
    checking that it lists one target for each."""
    import yaml

    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    [job] = [j for j in config["scrape_configs"] if j.get("metrics_path") == "/metrics/nodes"]
    of = int(job["params"]["of"][0])
    listed = sorted(int(group["labels"]["shard"]) for group in job["static_configs"])
    if listed != list(range(of)):
        raise ValueError(f"prometheus.yml: of={of} but the shards listed are {listed}")
    return of


def scrape_targets(urls: list[str], shards: int) -> list[str]:
    """The targets deploy/prometheus/prometheus.yml lists: the fleet's own
    series from each web process, each node shard from one, in turn."""
    targets = [url + "/metrics/fleet" for url in urls]
    targets += [f"{urls[i % len(urls)]}/metrics/nodes?shard={i}&of={shards}" for i in range(shards)]
    return targets


def _get_timed(client: httpx.Client, url: str) -> tuple[float, int]:
    started = time.perf_counter()
    answer = client.get(url)
    seconds = time.perf_counter() - started
    answer.raise_for_status()
    return seconds, len(answer.content)


def scrape(plane: Plane, shards: int, whole: bool = True) -> dict[str, float]:
    """One scrape of every target, one after another, as Prometheus does
    over an interval: bytes, the slowest target, and the CPU seconds the
    whole scrape cost the web processes and the database (their CPU over
    the scrape less what they spent over as long a time just before, idle
    of scrapes). `whole`: also time /metrics answering everything at once."""
    web = processes(plane.web_pids or plane.pids)
    database = processes(plane.database_pids)
    headers = {"Authorization": f"Bearer {plane.token}"}
    with httpx.Client(headers=headers, timeout=120) as client:
        _get_timed(client, plane.url + "/metrics/fleet")  # connections and imports warm
        before = (cpu_seconds(web), cpu_seconds(database))
        started = time.monotonic()
        time.sleep(5.0)
        idle = time.monotonic() - started
        rates = ((cpu_seconds(web) - before[0]) / idle, (cpu_seconds(database) - before[1]) / idle)
        before, started = (cpu_seconds(web), cpu_seconds(database)), time.monotonic()
        answers = [_get_timed(client, t) for t in scrape_targets(plane.urls, shards)]
        wall = time.monotonic() - started
        cpu = cpu_seconds(web) - before[0] - rates[0] * wall
        database_cpu = cpu_seconds(database) - before[1] - rates[1] * wall
        out = {
            "targets": float(len(answers)),
            "bytes": float(sum(b for _, b in answers)),
            "slowest_s": max(s for s, _ in answers),
            "wall_s": wall,
            "cpu_s": max(0.0, cpu),
            "database_cpu_s": max(0.0, database_cpu),
        }
        if whole:
            out["whole_s"], whole_bytes = _get_timed(client, plane.url + "/metrics")
            out["whole_bytes"] = float(whole_bytes)
    return out


# --- what operators run -----------------------------------------------------


def ctl_nodes(plane: Plane, runs: int = 3) -> dict[str, float]:
    """`llmgw ctl nodes` as an operator runs it: seconds to the last line,
    median of `runs`, as explain and the first paint are."""
    env = {**plane.env, "LLMGW_URL": plane.url, "LLMGW_TOKEN": plane.token}
    llmgw = str(Path(sys.executable).parent / "llmgw")
    times, lines = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [llmgw, "ctl", "nodes"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"llmgw ctl nodes exited {done.returncode}: {done.stderr[-500:]}")
        lines = len(done.stdout.splitlines())
    return {"seconds": statistics.median(times), "lines": float(lines)}


def first_paint(plane: Plane, runs: int = 3) -> float:
    """The cluster page's first contentful paint in Chromium, from
    navigation start, median of `runs`, logged in as the operator."""
    from tests.servers import chromium

    with chromium() as browser:
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.goto(plane.url + "/login/")
        page.fill("input[name=username]", plane.user)
        page.fill("input[name=password]", plane.password)
        page.click("button[type=submit]")
        page.wait_for_url(plane.url + "/")
        times = []
        for _ in range(runs):
            page.goto(plane.url + "/")
            page.wait_for_function(PAINTED, timeout=60000)
            times.append(page.evaluate(FIRST_PAINT) / 1000)
    return statistics.median(times)


def probes_for(members: list[tuple[Any, str]], interval_s: float) -> list[Probe]:
    """Probes from simulated nodes (llmgw.simulator.fleet.SimNode) and their
    credentials: each with its registration and three heartbeats."""
    import msgspec

    out = []
    for sim, credential in members:
        beats = [msgspec.json.encode(sim.heartbeat()) for _ in range(3)]
        registration = msgspec.json.encode(sim.registration(interval_s))
        out.append(Probe(sim.name, credential, registration, beats))
    return out
