# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""A key's limits through the gateway under uvicorn, counted in the real
Redis (REDIS_URL): requests and tokens a minute and requests at once give
429 with OpenAI's rate-limit headers, several gateway processes share the
counts, and a request's slot comes back on every path."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings

from llmgw.serving import keys
from llmgw.serving.gateway import limits
from llmgw.serving.gateway.app import Gateway, mount
from tests.servers import ServerThread
from tests.serving.gateway_peers import GatewayServer, engines, gateway_server  # noqa: F401
from tests.serving.test_gateway import replica

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
RESET = re.compile(r"^(\d+ms|\d+(\.\d+)?s|\d+m\d+s)$")


@pytest.fixture(autouse=True)
def counters() -> Iterator[redis.Redis]:
    """The test's Redis, without the counters of an earlier run (key ids
    start again at 1 in a fresh test database)."""
    if not settings.REDIS_URL:
        pytest.fail("these tests count in Redis: set REDIS_URL")
    client = redis.Redis.from_url(settings.REDIS_URL)
    for name in client.scan_iter(limits.PREFIX + "*"):
        client.delete(name)
    yield client
    client.close()


def same_minute(client: redis.Redis, seconds: float) -> None:
    """Wait for a new minute when this one has less than `seconds` left:
    the windows are Redis's clock minutes."""
    now, micros = client.time()
    left = 60 - (now % 60) - micros / 1e6
    if left < seconds:
        time.sleep(left + 0.05)


def make_key(**limit: int | None) -> str:
    return keys.create_key(f"k{time.monotonic_ns()}", None, ["tiny"], limits=limit).key


def post(gw: Any, key: str, body: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        json=body or CHAT,
        headers={"authorization": f"Bearer {key}"},
        timeout=20,
    )


def test_requests_per_minute_429_with_openai_headers(gateway_server, engines, counters):
    replica("tiny", engines("a").url)
    key = make_key(requests_per_minute=2)
    gateway_server.refresh()
    same_minute(counters, 10)

    first, second, third = (post(gateway_server, key) for _ in range(3))
    assert first.status_code == second.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    assert RESET.match(first.headers["x-ratelimit-reset-requests"])
    # Only the limits the key has: no token headers without a token limit.
    assert "x-ratelimit-limit-tokens" not in first.headers

    assert third.status_code == 429
    error = third.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
    assert "requests per minute" in error["message"] and "limit 2" in error["message"]
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    retry = int(third.headers["retry-after"])
    assert 1 <= retry <= 60
    assert RESET.match(third.headers["x-ratelimit-reset-requests"])
    # The refused request reached no engine.
    assert gateway_server.gateway.requests["tiny"] == {"200": 2, "429": 1}


def test_tokens_per_minute_are_charged_from_the_engines_usage(gateway_server, engines, counters):
    # The fake engine reports 1 prompt and 1 completion token an answer.
    replica("tiny", engines("a").url)
    key = make_key(tokens_per_minute=3)
    gateway_server.refresh()
    same_minute(counters, 10)

    first = post(gateway_server, key)
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-tokens"] == "3"
    assert first.headers["x-ratelimit-remaining-tokens"] == "3"
    # Below the limit (2 of 3) the next is let in and takes the minute past it.
    second = post(gateway_server, key)
    assert second.status_code == 200 and second.headers["x-ratelimit-remaining-tokens"] == "1"
    third = post(gateway_server, key)
    assert third.status_code == 429
    assert third.json()["error"]["type"] == "tokens"
    assert third.headers["x-ratelimit-remaining-tokens"] == "0"
    assert RESET.match(third.headers["x-ratelimit-reset-tokens"])
    assert "retry-after" in third.headers


def test_a_one_at_a_time_client_is_never_refused_its_next_request(gateway_server, engines):
    """The slot is given back before the answer's last byte: a client that
    sends its next request on reading the end of this one finds it free."""
    replica("tiny", engines("a").url)
    key = make_key(max_concurrent_requests=1)
    gateway_server.refresh()
    with httpx.Client(timeout=20, headers={"authorization": f"Bearer {key}"}) as http:
        for i in range(30):
            body = {**CHAT, "stream": True} if i % 2 else CHAT
            answer = http.post(gateway_server.url + "/v1/chat/completions", json=body)
            assert answer.status_code == 200, (i, answer.text)


def test_at_once_limit_and_the_slot_back_after_a_hang_up(gateway_server, engines, counters):
    replica("tiny", engines("stalls", mode="stall").url)
    replica("other", engines("ok").url)
    key = keys.create_key("k", None, ["tiny", "other"], limits={"max_concurrent_requests": 1}).key
    gateway_server.refresh()
    auth = {"authorization": f"Bearer {key}"}
    with (
        httpx.Client(timeout=20) as http,
        http.stream(
            "POST",
            gateway_server.url + "/v1/chat/completions",
            json={**CHAT, "stream": True},
            headers=auth,
        ) as response,
    ):
        # Held: a generator dropped closes the response, which is a hang-up.
        chunks = response.iter_bytes()
        assert next(chunks).startswith(b"data: ")
        refused = httpx.post(
            gateway_server.url + "/v1/chat/completions",
            json={**CHAT, "model": "other"},
            headers=auth,
        )
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert "at once" in refused.json()["error"]["message"]
        assert refused.headers["retry-after"] == "1"
    # The client hung up on the stream: its slot comes back.
    deadline = time.monotonic() + 5
    while True:
        answer = httpx.post(
            gateway_server.url + "/v1/chat/completions",
            json={**CHAT, "model": "other"},
            headers=auth,
        )
        if answer.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert answer.status_code == 200, answer.text
    assert gateway_server.gateway.limits.held == {}
    assert counters.zcard(f"{limits.PREFIX}{keys_id(key)}:c") == 0


def keys_id(key: str) -> int:
    from llmgw.serving.models import ApiKey

    return int(ApiKey.objects.get(prefix=key[:14]).pk)


def test_the_slot_comes_back_after_an_upstream_error(gateway_server, engines, counters):
    replica("tiny", engines("a", mode="500").url)
    key = make_key(max_concurrent_requests=1)
    gateway_server.refresh()
    for _ in range(3):
        assert post(gateway_server, key).status_code == 500
        stream = post(gateway_server, key, {**CHAT, "stream": True})
        assert stream.status_code == 500
    assert counters.zcard(f"{limits.PREFIX}{keys_id(key)}:c") == 0


@pytest.fixture
def second_gateway(transactional_db: Any) -> Iterator[GatewayServer]:
    """Another gateway process's worth: its own app, loop and connections."""
    from django.core.asgi import get_asgi_application

    gateway = Gateway(background=False)
    server = ServerThread(mount(gateway, get_asgi_application())).start()
    yield GatewayServer(gateway, server)
    server.call(gateway.stop())
    server.stop()


def test_gateway_processes_share_the_counts(gateway_server, second_gateway, engines, counters):
    replica("tiny", engines("a").url)
    key = make_key(requests_per_minute=3)
    gateway_server.refresh()
    second_gateway.refresh()
    same_minute(counters, 10)
    codes = [post(gw, key).status_code for gw in (gateway_server, second_gateway)]
    # A Redis that lost its scripts (restarted, flushed) is given them again.
    counters.script_flush()
    codes += [post(gw, key).status_code for gw in (gateway_server, second_gateway)]
    assert codes == [200, 200, 200, 429]


def test_a_key_without_limits_asks_nothing_of_redis(gateway_server, engines, counters):
    replica("tiny", engines("a").url)
    key = make_key()
    gateway_server.refresh()
    answer = post(gateway_server, key)
    assert answer.status_code == 200
    assert not [h for h in answer.headers if h.startswith("x-ratelimit")]
    assert list(counters.scan_iter(limits.PREFIX + "*")) == []


def test_limits_set_later_apply_at_the_next_key_load(gateway_server, engines, counters):
    replica("tiny", engines("a").url)
    key = make_key()
    gateway_server.refresh()
    same_minute(counters, 10)
    assert post(gateway_server, key).status_code == 200
    from llmgw.serving.models import ApiKey

    keys.set_limits(ApiKey.objects.get(pk=keys_id(key)), {"requests_per_minute": 1})
    gateway_server.refresh()
    assert post(gateway_server, key).status_code == 200
    assert post(gateway_server, key).status_code == 429


def test_an_unreachable_redis_lets_requests_through(gateway_server, engines, caplog):
    replica("tiny", engines("a").url)
    key = make_key(requests_per_minute=1)
    gateway_server.refresh()
    gw = gateway_server.gateway
    gateway_server.server.call(gw.limits.close())
    gw.limits.store = limits.RedisStore("redis://127.0.0.1:1/0")
    codes = [post(gateway_server, key).status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    assert "key limits not enforced" in caplog.text


def test_reset_times_are_written_as_openai_writes_them():
    assert limits.duration(12) == "12ms"
    assert limits.duration(1500) == "1.5s"
    assert limits.duration(59_000) == "59s"
    assert limits.duration(360_000) == "6m0s"


def test_a_lease_is_kept_while_renewed_and_freed_when_its_process_is_gone(counters, monkeypatch):
    """Two processes' limiters on the real Redis: one holding the key's only
    slot keeps it by renewing, and loses it once it stops (it died)."""
    import asyncio

    from llmgw.serving.gateway.snapshot import KeyScope, Limits

    monkeypatch.setattr(limits, "LEASE_S", 0.6)
    key = KeyScope(7, "k", None, Limits(None, None, 1))

    async def run() -> list[str]:
        holder, other = limits.Limiter(settings.REDIS_URL), limits.Limiter(settings.REDIS_URL)
        holder.open()
        other.open()
        try:
            seen = []
            held = await holder.admit(key)
            assert held is not None and not held.refused
            for _ in range(3):
                await asyncio.sleep(0.3)
                await holder.renew(force=True)
                refused = await other.admit(key)
                seen.append(refused.refused if refused else "unreachable")
            await asyncio.sleep(0.7)  # no renewal: the holder is gone
            after = await other.admit(key)
            seen.append(after.refused if after else "unreachable")
            return seen
        finally:
            await holder.close()
            await other.close()

    assert asyncio.run(run()) == ["concurrency", "concurrency", "concurrency", ""]


def test_a_slot_whose_request_ended_unfinished_comes_back_at_the_next_renewal(counters):
    import asyncio

    from llmgw.serving.gateway.snapshot import KeyScope, Limits

    key = KeyScope(8, "k", None, Limits(None, None, 1))

    async def run() -> list[str]:
        limiter = limits.Limiter(settings.REDIS_URL)
        limiter.open()
        try:
            # A request's task that takes the slot and dies before it ends.
            async def request() -> None:
                await limiter.admit(key)
                raise RuntimeError("a path nobody foresaw")

            await asyncio.gather(asyncio.create_task(request()), return_exceptions=True)
            held = await limiter.admit(key)
            seen = [held.refused if held else "unreachable"]
            await limiter.renew(force=True)
            again = await limiter.admit(key)
            seen.append(again.refused if again else "unreachable")
            return seen
        finally:
            await limiter.close()

    assert asyncio.run(run()) == ["concurrency", ""]


def test_without_redis_the_one_process_counts_alike():
    """The embedded default (no REDIS_URL, one web process): the same
    windows and slots, kept in the process."""
    import asyncio

    from llmgw.serving.gateway.snapshot import KeyScope, Limits

    key = KeyScope(9, "k", None, Limits(2, 3, 1))

    async def run() -> list[str]:
        limiter = limits.Limiter(None)
        limiter.open()
        assert isinstance(limiter.store, limits.MemoryStore)
        first, second = await limiter.admit(key), await limiter.admit(key)
        assert first is not None and second is not None
        await limiter.finish(first, 4)  # the slot back, 4 tokens of 3
        third = await limiter.admit(key)
        assert third is not None
        return [second.refused, third.refused]

    now = time.time() % 60
    if now > 58:
        time.sleep(60 - now + 0.05)
    assert asyncio.run(run()) == ["concurrency", "tokens"]
