"""A whole simulated fleet in one process, on one event loop.

A thread per node (the agent's own client, a blocking WebSocket each)
does not reach thousands of nodes: threads, sockets and a Python
interpreter switching between them cost more than building the payloads.
Here every node is a coroutine on one loop sharing one HTTP connection
pool, each on its own jittered interval, sending what a real agent sends
(llmgw.simulator.fleet builds it with the protocol's own builders) and
answering its command stream over one shared WebSocket session.

The pool has no cap on its connections: an agent has one of its own, so
a slow control plane makes each node wait for its own answer, never for
another node's turn at a connection. With a cap of 256, at most 256
heartbeats were in flight, so at 0.6 s an answer fewer than the 500 a
second that 5,000 nodes send went out: the rest queued in the simulator,
the queue grew by the minute, nodes went 80 s without a heartbeat sent
and were marked NotReady for it (bench-fleet, 2026-12-07, on a machine
slow that hour): the simulator's queue, not the control plane, had them
silent. Uncapped, a control plane that cannot keep up shows as a real
fleet would see it, heartbeats waiting in its processes and timing out.
Idle connections are kept and used again, so the sockets open are about
the heartbeats in flight.

Every node behaves as an agent does: it registers before its first
heartbeat and again when the answer asks it to, takes the answer's
desired state, fails over to the next web process when one does not
answer, and reopens its command stream with backoff. The time from a
heartbeat's send to its answer is recorded: the answer comes once the
heartbeat is stored, so it is what `make bench-heartbeat` measures.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import msgspec
from llmgw_agent.client import RETRY_CAP_S, TIMEOUT_S, Backoff
from llmgw_agent.collectors.registry import Roots
from llmgw_agent.protocol import SCHEMA
from llmgw_agent.protocol.build import build_heartbeat, heartbeat_payload
from llmgw_agent.protocol.messages import Join
from llmgw_agent.protocol.stream import Command, Result
from llmgw_agent.stream import STREAM, Handler

from llmgw.simulator import perftest
from llmgw.simulator.fleet import SimNode

log = logging.getLogger("llmgw.simulate")
T = TypeVar("T")

JOIN, REGISTER, HEARTBEAT = (
    "/api/agent/v1/join",
    "/api/agent/v1/register",
    "/api/agent/v1/heartbeat",
)
_JSON = {"Content-Type": "application/json"}
# A heartbeat's interval varies by this much either way, as real agents'
# timers drift apart; nodes also start at random points of the interval.
JITTER = 0.1
# One heartbeat in this many is checked against the protocol before it is sent.
CHECK_EVERY = 30
# How often the swarm says what held its nodes up, when anything did.
WATCH_S = 10.0
# A loop late by more than this is reported: the simulator itself did not send.
LAG_S = 1.0
_encode = msgspec.json.Encoder().encode
_read_command = msgspec.json.Decoder(Command).decode


def run(main: Coroutine[Any, Any, T]) -> T:
    """`main` on uvloop where it is installed (uvicorn's own loop), which
    takes a third off what each request costs the simulator; else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def step_timeout() -> aiohttp.ClientTimeout:
    """The agent's own (httpx, TIMEOUT_S): a connect, or a wait for the
    answer's next bytes, held up longer sends the request to the next web
    process. Counted per step on the connection, as an agent counts it,
    and not from the call: a whole-call limit also counted the wait for
    one of the shared pool's connections, which no agent has. When the
    pool had a cap of 256, after an outage 5,000 nodes queued for it, and
    that limit gave up on 3,610 heartbeats that a real fleet would have
    sent (each node then waited its retry, the tail of the return)."""
    return aiohttp.ClientTimeout(
        total=None, connect=None, sock_connect=TIMEOUT_S, sock_read=TIMEOUT_S
    )


class Unavailable(Exception):
    """No web process answered (refused, timed out, or 5xx from each)."""


class Refused(Exception):
    """A 4xx: the control plane does not take this from this node."""


def handlers(sim: SimNode) -> dict[str, Handler]:
    """What a simulated node's stream answers (its registration's features)."""

    def ping(roots: Roots, args: Mapping[str, Any]) -> str:
        return "pong"

    def ibnetdiscover(roots: Roots, args: Mapping[str, Any]) -> str:
        if sim.ib is None:
            raise RuntimeError("ibnetdiscover: no InfiniBand adapter on this node")
        if args.get("ports"):
            raise RuntimeError("the simulator prints the topology format only")
        return sim.ib.discover(sim.name, str(args.get("device") or "mlx5_0"))

    out: dict[str, Handler] = {"ping": ping}
    if sim.ib is not None:
        out["ibnetdiscover"] = ibnetdiscover
        out.update(perftest.handlers(sim))
    return out


@dataclass
class Stats:
    """Heartbeats answered (with their send-to-answer seconds) and failed."""

    latencies: list[float] = field(default_factory=list)
    failed: int = 0
    registered: int = 0

    def reset(self) -> None:
        self.latencies, self.failed = [], 0


@dataclass
class Member:
    sim: SimNode
    credential: str
    # The web process it posts to first (an index into the swarm's URLs);
    # None: by its place in the fleet, so the fleet is spread over them as
    # real agents' server_urls would spread it, and not all on the first.
    url: int | None = None
    registered: bool = False
    beats: int = 0
    # Sent back with each heartbeat, as an agent does: the answer then
    # carries the desired state only when it changed.
    desired_digest: str | None = None
    # Set by the swarm: the agent's own, for retrying a failed heartbeat.
    backoff: Backoff | None = None
    # time.monotonic() of its last answered heartbeat; None before the first.
    answered: float | None = None


class Swarm:
    def __init__(
        self,
        urls: list[str],
        members: list[Member],
        interval_s: float,
        *,
        streams: bool = True,
        seed: int = 7,
        connections: int = 0,
        tick: Callable[[], None] | None = None,
    ) -> None:
        self.urls = [url.rstrip("/") for url in urls]
        self.members = members
        self.interval_s = interval_s
        self.streams = streams
        self.rng = random.Random(seed)
        self.connections = connections
        self.tick = tick
        self.stats = Stats()
        self.joins = 0
        # The fabric test's commands block for their run: never on the loop.
        self.commands = ThreadPoolExecutor(4, thread_name_prefix="simulate-command")
        # Registrations are the heaviest request; a fleet starting at once
        # must not queue thousands of them ahead of everyone's heartbeats.
        self.registering = asyncio.Semaphore(16)
        self.session: aiohttp.ClientSession | None = None
        # The command streams' own: each holds its connection for good, and
        # in a pool capped at 256 they left none for heartbeats.
        self.stream_session: aiohttp.ClientSession | None = None
        self._answering: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Swarm:
        # `connections`: 0, no cap (above); a test may cap it.
        connector = aiohttp.TCPConnector(limit=self.connections, ttl_dns_cache=None)
        self.session = aiohttp.ClientSession(connector=connector, timeout=step_timeout())
        if self.streams:
            self.stream_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for session in (self.session, self.stream_session):
            if session is not None:
                await session.close()
        self.commands.shutdown(wait=False, cancel_futures=True)

    async def run(self, seconds: float | None = None, once: bool = False) -> None:
        """Until cancelled, for `seconds`, or (once) one registration and
        one heartbeat of each node."""
        # As the agent caps it (llmgw_agent.main): an outage's retries are
        # jittered and never further apart than RETRY_CAP_S.
        cap = min(RETRY_CAP_S, max(self.interval_s * 6, 1.0))
        for i, member in enumerate(self.members):
            if member.url is None:
                member.url = i % len(self.urls)
            if member.backoff is None:
                member.backoff = Backoff(cap=cap, rng=self.rng.random)
        if once:
            await asyncio.gather(*(self._beat(m) for m in self.members))
            return
        tasks = [asyncio.create_task(self._life(m)) for m in self.members]
        if self.streams:
            tasks += [asyncio.create_task(self._stream(m)) for m in self.members]
        tasks.append(asyncio.create_task(self._watching()))
        if self.tick is not None:
            tasks.append(asyncio.create_task(self._ticking()))
        try:
            if seconds is None:
                await asyncio.gather(*tasks)
            else:
                await asyncio.sleep(seconds)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _ticking(self) -> None:
        assert self.tick is not None
        while True:
            self.tick()
            await asyncio.sleep(1.0)

    async def _watching(self) -> None:
        """Every WATCH_S, when anything held the nodes up, one line saying
        what: the swarm's own loop running late (on a starved machine the
        simulator, not the control plane, fell silent), heartbeats that no
        web process answered, and nodes with no answer for two intervals
        (the control plane marks them NotReady a few intervals on). Without
        it a bench run's NotReady marks could not be put down to either side."""
        loop = asyncio.get_running_loop()
        failed, window_start = self.stats.failed, loop.time()
        held = 0.0
        while True:
            before = loop.time()
            await asyncio.sleep(1.0)
            held = max(held, loop.time() - before - 1.0)
            if loop.time() - window_start < WATCH_S:
                continue
            window_start = loop.time()
            failures, failed = max(0, self.stats.failed - failed), self.stats.failed
            silent = self.silent(time.monotonic(), 2 * self.interval_s)
            if held > LAG_S or failures or silent:
                log.warning(
                    "simulator: its loop ran up to %.1f s late; %d heartbeats unanswered; "
                    "%d nodes with no answer for over %.0f s%s",
                    held, failures, len(silent), 2 * self.interval_s,
                    f" (the longest {max(silent):.0f} s)" if silent else "",
                )  # fmt: skip
            held = 0.0

    def silent(self, now: float, over_s: float) -> list[float]:
        """How long each node answered before has gone without an answer,
        for those past `over_s`."""
        return [
            now - m.answered
            for m in self.members
            if m.answered is not None and now - m.answered > over_s
        ]

    # -- joining -----------------------------------------------------------

    async def join(self, name: str, token: str) -> str:
        """The node's credential, for its one-time join token."""
        assert self.session is not None
        body = _encode(Join(schema=SCHEMA, node=name, token=token))
        # Spread over the web processes, as the nodes' heartbeats are.
        self.joins += 1
        url = self.urls[self.joins % len(self.urls)] + JOIN
        async with self.session.post(url, data=body, headers=_JSON) as response:
            answer = await response.json(content_type=None)
            if response.status != 200 or answer.get("node") != name:
                raise Refused(f"join {name}: {response.status} {answer}")
            return str(answer["credential"])

    # -- heartbeats ------------------------------------------------------

    async def _life(self, member: Member) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self.rng.uniform(0, self.interval_s)
        assert member.backoff is not None
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not await self._beat(member):
                # Retried as the agent retries (send_latest): after the
                # backoff's jittered delay, so a fleet returning from an
                # outage is spread over seconds, not sent in lockstep.
                due = loop.time() + member.backoff.next()
                continue
            member.backoff.reset()
            # On its own beat, not interval after the last answer: a slow
            # answer must not slow the node's heartbeats down.
            due += self.interval_s * self.rng.uniform(1 - JITTER, 1 + JITTER)
            if due < loop.time():
                due = loop.time()

    async def _beat(self, member: Member) -> bool:
        """Register if need be, then one heartbeat; whether a web process answered."""
        sim = member.sim
        try:
            if not member.registered:
                async with self.registering:
                    await self._post(member, REGISTER, _encode(sim.registration(self.interval_s)))
                member.registered = True
                self.stats.registered += 1
            body = self._body(member)
            started = time.perf_counter()
            answer = await self._post(member, HEARTBEAT, body)
            self.stats.latencies.append(time.perf_counter() - started)
            member.answered = time.monotonic()
        except Unavailable as exc:
            self.stats.failed += 1
            log.warning("%s: %s", sim.name, exc)
            return False
        except Refused as exc:
            self.stats.failed += 1
            log.error("%s: %s", sim.name, exc)
            return True  # an answer: sending it again at once would not change it
        if "desired" in answer:
            sim.desired = answer["desired"]
            member.desired_digest = answer.get("desired_digest")
        if answer.get("register"):
            member.registered = False
        return True

    @staticmethod
    def _body(member: Member) -> bytes:
        """The node's next heartbeat as JSON, checked against the protocol's
        bounds on its first beat and every CHECK_EVERY-th, as an agent's
        build_heartbeat checks each of its own: checking every one was the
        biggest cost of a fleet of thousands, and the server checks every
        one regardless."""
        member.beats += 1
        sim, digest = member.sim, member.desired_digest
        if member.beats % CHECK_EVERY == 1:
            return _encode(build_heartbeat(sim.name, desired_digest=digest, **sim.parts()))
        return _encode(heartbeat_payload(sim.name, desired_digest=digest, **sim.parts()))

    async def _post(self, member: Member, path: str, body: bytes) -> dict[str, Any]:
        """POST to the web process this node uses, and on to the next ones
        when it does not answer, as the agent's client does."""
        assert self.session is not None
        headers = {
            "Authorization": f"Node {member.credential}",
            "Content-Type": "application/json",
        }
        failures = []
        for _ in self.urls:
            index = member.url or 0
            url = self.urls[index]
            try:
                async with self.session.post(url + path, data=body, headers=headers) as response:
                    if response.status < 500:
                        answer: dict[str, Any] = await response.json(content_type=None)
                        if response.status >= 400:
                            raise Refused(f"POST {path}: {response.status} {answer}")
                        return answer
                    failures.append(f"{url}: {response.status}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                failures.append(f"{url}: {type(exc).__name__} {exc}")
                _forget(exc)
            member.url = (index + 1) % len(self.urls)
        raise Unavailable(f"POST {path}: " + "; ".join(failures))

    # -- the command stream ----------------------------------------------

    async def _stream(self, member: Member) -> None:
        assert self.stream_session is not None
        # The agent's own (llmgw_agent.stream): reopened 1, 2, 4, 8 s, then
        # every 5-10 s, jittered, until it is back.
        backoff = Backoff(rng=self.rng.random)
        commands = handlers(member.sim)
        await asyncio.sleep(self.rng.uniform(0, self.interval_s))
        while True:
            base = self.urls[member.url or 0]
            url = "ws" + base[len("http") :] + STREAM
            try:
                async with self.stream_session.ws_connect(
                    url, headers={"Authorization": f"Node {member.credential}"}, heartbeat=None
                ) as ws:
                    backoff.reset()
                    async for message in ws:
                        if message.type != aiohttp.WSMsgType.TEXT:
                            break
                        task = asyncio.create_task(self._answer(ws, commands, message.data))
                        # Held until done: the loop keeps only weak references.
                        self._answering.add(task)
                        task.add_done_callback(self._answering.discard)
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.debug("%s: command stream: %s", member.sim.name, exc)
                _forget(exc)
            await asyncio.sleep(backoff.next())

    async def _answer(
        self, ws: aiohttp.ClientWebSocketResponse, commands: Mapping[str, Handler], raw: str
    ) -> None:
        try:
            command = _read_command(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("ignoring a message on the command stream: %s", exc)
            return
        handler = commands.get(command.command)
        if handler is None:
            result = Result(
                id=command.id, ok=False, error=f"this agent does not answer {command.command!r}"
            )
        else:
            loop = asyncio.get_running_loop()
            try:
                output = await loop.run_in_executor(
                    self.commands, handler, Roots(), command.args or {}
                )
                result = Result(id=command.id, ok=True, output=output)
            except Exception as exc:  # noqa: BLE001 - a failed command is reported, never fatal
                result = Result(id=command.id, ok=False, error=f"{type(exc).__name__}: {exc}")
        try:
            await ws.send_str(_encode(result).decode())
        except (aiohttp.ClientError, ConnectionError) as exc:
            log.warning("could not send the result of command #%s: %s", command.id, exc)


def _forget(error: BaseException | None) -> None:
    """Drop the tracebacks of a handled error and of those it came from. Each
    holds frames that hold the futures and tasks that hold the error: a
    cycle only the collector frees, for every failed request, and a fleet
    whose control plane is away fails thousands a second."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
