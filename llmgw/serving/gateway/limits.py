"""A key's limits, shared by every gateway process: requests and tokens a
minute, and requests at once.

The counters live in Redis (REDIS_URL, as production runs), each check one
Lua script so that it is atomic across processes: a fixed window a minute,
aligned to Redis's own clock (every process reads the same minute), for
requests and for tokens; and for requests at once a sorted set of leases,
one a request, each expiring LEASE_S after it was last renewed. A request
ends by removing its lease, on every path (answered, failed, hung up; a
request whose task ended any other way, at the next renewal); a process
that dies holding leases frees them within LEASE_S, as its beat no longer
renews them.

Tokens are what the engines report in `usage` (prompt and completion),
charged when the answer ends: a request is let in while the minute's tokens
are below the limit, and may take the minute past it. A stream the client
hung up on reports no usage and is charged nothing.

A key with no limit asks nothing of Redis. Without REDIS_URL (the embedded
default, one web process) the same counters are kept in the process. If
Redis does not answer, requests go through unlimited (the gateway serves
rather than fails on its rate limiter) and the log says so.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmgw.serving.gateway.asgi import Send
from llmgw.serving.gateway.snapshot import KeyScope, Limits
from llmgw.serving.gateway.usage import reported

log = logging.getLogger("llmgw.gateway")

WINDOW_S = 60
# A request's slot among those at once is held this long past its last
# renewal; the gateway renews its own every RENEW_S.
LEASE_S = 60.0
RENEW_S = 15.0
PREFIX = "llmgw:limits:"
# One warning about an unreachable Redis per this many seconds.
WARN_EVERY_S = 30.0

# Returns: the limit refused ("" for none), requests this minute, tokens
# this minute, requests at once, milliseconds to the next minute.
_ADMIT = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local minute = math.floor(t[1] / 60)
local reset = (minute + 1) * 60000 - now
local rpm, tpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local rkey = KEYS[1] .. ':r:' .. minute
local tkey = KEYS[1] .. ':t:' .. minute
local ckey = KEYS[1] .. ':c'
local requests = tonumber(redis.call('GET', rkey) or '0')
local tokens = tonumber(redis.call('GET', tkey) or '0')
local at_once = 0
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', ckey, '-inf', now)
  at_once = redis.call('ZCARD', ckey)
end
local refused = ''
if rpm > 0 and requests >= rpm then refused = 'requests'
elseif tpm > 0 and tokens >= tpm then refused = 'tokens'
elseif conc > 0 and at_once >= conc then refused = 'concurrency' end
if refused == '' then
  if rpm > 0 then
    requests = redis.call('INCR', rkey)
    if requests == 1 then redis.call('PEXPIRE', rkey, reset + 1000) end
  end
  if conc > 0 then
    local lease = tonumber(ARGV[5])
    redis.call('ZADD', ckey, now + lease, ARGV[4])
    redis.call('PEXPIRE', ckey, lease)
    at_once = at_once + 1
  end
end
return {refused, requests, tokens, at_once, reset}
"""

# ARGV: the lease to drop ("" for none), then the tokens to charge.
_FINISH = """
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1] .. ':c', ARGV[1]) end
local tokens = tonumber(ARGV[2])
if tokens > 0 then
  local t = redis.call('TIME')
  local tkey = KEYS[1] .. ':t:' .. math.floor(t[1] / 60)
  if redis.call('INCRBY', tkey, tokens) == tokens then
    redis.call('PEXPIRE', tkey, ((math.floor(t[1] / 60) + 1) * 60 - t[1] + 1) * 1000)
  end
end
return 0
"""

# ARGV: the lease in ms, then pairs of a key's prefix and a lease to renew.
_RENEW = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lease = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  local ckey = ARGV[i] .. ':c'
  redis.call('ZADD', ckey, 'XX', now + lease, ARGV[i + 1])
  redis.call('PEXPIRE', ckey, lease)
end
return 0
"""


class Store(Protocol):
    async def admit(
        self, base: str, limits: tuple[int, int, int], lease: str, lease_ms: int
    ) -> list[Any]: ...
    async def finish(self, base: str, lease: str, tokens: int) -> None: ...
    async def renew(self, leases: list[tuple[str, str]], lease_ms: int) -> None: ...
    async def close(self) -> None: ...


class RedisStore:
    def __init__(self, url: str) -> None:
        import redis.asyncio
        from redis.exceptions import NoScriptError

        # Short timeouts: a request waits on this, and a Redis that does
        # not answer lets requests through rather than hold them.
        self.client = redis.asyncio.Redis.from_url(
            url, socket_timeout=1.0, socket_connect_timeout=1.0
        )
        self._no_script = NoScriptError
        self._shas: dict[str, str] = {}

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        # EVALSHA by hand: a quarter less CPU a call than redis-py's Script.
        sha = self._shas.get(script)
        if sha is not None:
            try:
                return await self.client.execute_command(  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                    "EVALSHA", sha, len(keys), *keys, *args
                )
            except self._no_script:
                pass  # Redis restarted, or its scripts were flushed
        self._shas[script] = await self.client.script_load(script)
        return await self.client.execute_command(  # type: ignore[no-untyped-call]  # as above
            "EVALSHA", self._shas[script], len(keys), *keys, *args
        )

    async def admit(
        self, base: str, limits: tuple[int, int, int], lease: str, lease_ms: int
    ) -> list[Any]:
        found = await self._run(_ADMIT, [base], [*limits, lease, lease_ms])
        refused = found[0]
        return [refused.decode() if isinstance(refused, bytes) else refused, *found[1:]]

    async def finish(self, base: str, lease: str, tokens: int) -> None:
        await self._run(_FINISH, [base], [lease, tokens])

    async def renew(self, leases: list[tuple[str, str]], lease_ms: int) -> None:
        await self._run(_RENEW, [], [lease_ms, *itertools.chain.from_iterable(leases)])

    async def close(self) -> None:
        await self.client.aclose()


class MemoryStore:
    """The same counters in this process, for the embedded default."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.leases: dict[str, dict[str, float]] = {}

    async def admit(
        self, base: str, limits: tuple[int, int, int], lease: str, lease_ms: int
    ) -> list[Any]:
        now = time.time()
        minute = int(now // WINDOW_S)
        reset = int(((minute + 1) * WINDOW_S - now) * 1000)
        rpm, tpm, conc = limits
        self._forget(minute)
        rkey, tkey = f"{base}:r:{minute}", f"{base}:t:{minute}"
        requests, tokens = self.counts.get(rkey, 0), self.counts.get(tkey, 0)
        held = self.leases.setdefault(base, {})
        for name in [n for n, until in held.items() if until <= now]:
            del held[name]
        refused = ""
        if rpm and requests >= rpm:
            refused = "requests"
        elif tpm and tokens >= tpm:
            refused = "tokens"
        elif conc and len(held) >= conc:
            refused = "concurrency"
        else:
            if rpm:
                requests = self.counts[rkey] = requests + 1
            if conc:
                held[lease] = now + lease_ms / 1000
        return [refused, requests, tokens, len(held), reset]

    def _forget(self, minute: int) -> None:
        for name in [n for n in self.counts if int(n.rsplit(":", 1)[1]) < minute]:
            del self.counts[name]

    async def finish(self, base: str, lease: str, tokens: int) -> None:
        self.leases.get(base, {}).pop(lease, None)
        if tokens > 0:
            tkey = f"{base}:t:{int(time.time() // WINDOW_S)}"
            self.counts[tkey] = self.counts.get(tkey, 0) + tokens

    async def renew(self, leases: list[tuple[str, str]], lease_ms: int) -> None:
        until = time.time() + lease_ms / 1000
        for base, lease in leases:
            held = self.leases.get(base, {})
            if lease in held:
                held[lease] = until

    async def close(self) -> None:
        pass


def duration(ms: float) -> str:
    """OpenAI's form of a reset time: "12ms", "1.5s", "6m0s"."""
    if ms < 1000:
        return f"{max(0, int(ms))}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest}s"


@dataclass(slots=True)
class Ticket:
    """A request let in: what it holds, and what its answer's headers say."""

    base: str
    limits: Limits
    lease: str
    headers: list[tuple[bytes, bytes]]
    refused: str = ""
    retry_after_s: int = 0
    finished: bool = field(default=False)
    # The request's task: one that ended without finishing its ticket (an
    # exception on a path nobody foresaw) gives its slot back at the next
    # renewal rather than holding it for as long as the process lives.
    task: asyncio.Task[Any] | None = None


def _headers(limits: Limits, found: list[Any], refused: str) -> list[tuple[bytes, bytes]]:
    _, requests, tokens, _, reset_ms = found
    reset = duration(int(reset_ms)).encode()
    headers: list[tuple[bytes, bytes]] = []
    rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
    if rpm is not None:
        headers += [
            (b"x-ratelimit-limit-requests", str(rpm).encode()),
            (b"x-ratelimit-remaining-requests", str(max(0, rpm - int(requests))).encode()),
            (b"x-ratelimit-reset-requests", reset),
        ]
    if tpm is not None:
        headers += [
            (b"x-ratelimit-limit-tokens", str(tpm).encode()),
            (b"x-ratelimit-remaining-tokens", str(max(0, tpm - int(tokens))).encode()),
            (b"x-ratelimit-reset-tokens", reset),
        ]
    return headers


class Limiter:
    def __init__(self, redis_url: str | None) -> None:
        self.redis_url = redis_url
        self.store: Store | None = None
        # This process's requests holding a slot among those at once.
        self.held: dict[str, Ticket] = {}
        self._ids = itertools.count()
        self._process = f"{os.getpid()}:{time.time_ns()}"
        self._renewed_at = 0.0
        self._warned_at = -math.inf

    def open(self) -> None:
        self.store = RedisStore(self.redis_url) if self.redis_url else MemoryStore()

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
            self.store = None

    async def admit(self, key: KeyScope) -> Ticket | None:
        """The request's ticket (refused when `.refused`); None when the
        counters could not be reached and the request goes through."""
        limits = key.limits
        assert limits is not None and self.store is not None
        base = f"{PREFIX}{key.id}"
        lease = f"{self._process}:{next(self._ids)}" if limits.max_concurrent_requests else ""
        try:
            found = await self.store.admit(
                base,
                (
                    limits.requests_per_minute or 0,
                    limits.tokens_per_minute or 0,
                    limits.max_concurrent_requests or 0,
                ),
                lease,
                int(LEASE_S * 1000),
            )
        except Exception as exc:  # noqa: BLE001  # any failure of the store lets requests through
            self._warn(exc)
            return None
        refused = str(found[0])
        ticket = Ticket(base, limits, lease, _headers(limits, found, refused), refused)
        if refused:
            # Concurrency frees when any request ends: soon, not next minute.
            ticket.retry_after_s = (
                1 if refused == "concurrency" else max(1, math.ceil(int(found[4]) / 1000))
            )
            ticket.headers.append((b"retry-after", str(ticket.retry_after_s).encode()))
            ticket.finished = True
        elif lease:
            ticket.task = asyncio.current_task()
            self.held[lease] = ticket
        return ticket

    async def finish(self, ticket: Ticket, tokens: int) -> None:
        """Give back the request's slot and charge its tokens; once only."""
        if ticket.finished:
            return
        ticket.finished = True
        self.held.pop(ticket.lease, None)
        charge = tokens if ticket.limits.tokens_per_minute is not None else 0
        if not ticket.lease and not charge:
            return
        assert self.store is not None
        try:
            await self.store.finish(ticket.base, ticket.lease, charge)
        except Exception as exc:  # noqa: BLE001  # its lease then expires on its own
            self._warn(exc)

    def sending(self, send: Send, ticket: Ticket, state: dict[str, Any]) -> Send:
        """`send` for a limited key's answer: its rate-limit headers on the
        answer, and its slot given back before the last byte goes out (a
        client that sends its next request on seeing the end of this one,
        as a one-at-a-time client does, must find the slot free)."""

        async def limited(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *ticket.headers]}
            elif not message.get("more_body"):
                await self.finish(ticket, sum(reported(state) or ()))
            await send(message)

        return limited

    async def renew(self, force: bool = False) -> None:
        """Renew this process's leases, every RENEW_S (called on a beat)."""
        now = time.monotonic()
        if not self.held or self.store is None or (not force and now - self._renewed_at < RENEW_S):
            return
        self._renewed_at = now
        for orphan in [t for t in self.held.values() if t.task is not None and t.task.done()]:
            await self.finish(orphan, 0)
        if not self.held:
            return
        try:
            await self.store.renew(
                [(t.base, t.lease) for t in list(self.held.values())], int(LEASE_S * 1000)
            )
        except Exception as exc:  # noqa: BLE001  # the next beat tries again
            self._warn(exc)

    def _warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("gateway: key limits not enforced, their counters failed: %r", exc)


def refusal(ticket: Ticket) -> str:
    """The 429's words, naming the limit as OpenAI's own do."""
    limits = ticket.limits
    if ticket.refused == "requests":
        return (
            f"Rate limit reached for requests per minute (RPM): limit "
            f"{limits.requests_per_minute}. Please try again in {ticket.retry_after_s}s."
        )
    if ticket.refused == "tokens":
        return (
            f"Rate limit reached for tokens per minute (TPM): limit "
            f"{limits.tokens_per_minute}. Please try again in {ticket.retry_after_s}s."
        )
    return (
        f"Too many requests at once for this key: limit {limits.max_concurrent_requests}. "
        "Please try again when one of them ends."
    )
