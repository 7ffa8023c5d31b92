# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""Flow control: a request for a model with no free ready replica waits in
the gateway's queue for that model, bounded in length and in time, and goes
out in arrival order when a replica becomes ready or a slot frees."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from llmgw.catalog.models import Model
from tests.serving.gateway_peers import engines, gateway_server  # noqa: F401
from tests.serving.test_gateway import MESSAGES, key, replica

pytestmark = pytest.mark.django_db(transaction=True)


def until(check: Callable[[], Any], seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.02)
    raise AssertionError(f"not within {seconds} s")


def held_at_zero(name: str = "lazy") -> None:
    """Held only under load: with no replica, requests for it wait."""
    Model.objects.create(name=name, source=f"hf://x/{name}", always_running=0, under_load=1)


def post(gw: Any, api_key: str, model: str, text: str, **extra: Any) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}], **extra},
        headers={"authorization": f"Bearer {api_key}"},
        timeout=30,
    )


def test_queued_requests_go_out_in_arrival_order_when_a_replica_is_ready(gateway_server, engines):
    held_at_zero()
    api_key = key("lazy")
    flow = gateway_server.gateway.flow
    # One at a time per replica: the engine sees them in the order they left.
    flow.per_replica = 1
    gateway_server.refresh()
    pool = ThreadPoolExecutor(3)
    sent: list[Future[httpx.Response]] = []
    for i in range(3):
        sent.append(pool.submit(post, gateway_server, api_key, "lazy", f"r{i}"))
        until(lambda n=i + 1: flow.waiting("lazy") == n)
    time.sleep(0.3)
    assert not any(f.done() for f in sent), "answered with no replica"

    a = engines("a")
    replica("lazy", a.url)
    gateway_server.refresh()
    answers = [f.result(timeout=10) for f in sent]
    assert [r.status_code for r in answers] == [200, 200, 200]
    assert [b["messages"][0]["content"] for b in a.bodies] == ["r0", "r1", "r2"]
    # A request's place is given back once its answer is sent, which the
    # client may read first: a busy machine saw admitted 1 here.
    until(lambda: flow.waiting("lazy") == 0 and flow.admitted["lazy"] == 0, 5)


def test_a_request_waits_while_every_replica_is_at_its_limit(gateway_server, engines):
    a = engines("a", mode="stall")
    replica("tiny", a.url)
    api_key = key("tiny")
    flow = gateway_server.gateway.flow
    flow.per_replica = 1
    gateway_server.refresh()
    headers = {"authorization": f"Bearer {api_key}"}
    body = {"model": "tiny", "messages": MESSAGES, "stream": True}
    with (
        ThreadPoolExecutor(1) as pool,
        httpx.stream(
            "POST", gateway_server.url + "/v1/chat/completions", json=body, headers=headers
        ) as held,
    ):
        # Keep the iterator: a dropped one closes the response, a hang-up.
        chunks = held.iter_bytes()
        assert next(chunks).startswith(b"data: ")  # the one slot is taken
        second = pool.submit(post, gateway_server, api_key, "tiny", "next")
        until(lambda: flow.waiting("tiny") == 1)
        time.sleep(0.3)
        assert not second.done()
    # The stream's client hung up: its slot goes to the request that waited.
    assert second.result(timeout=10).status_code == 200
    assert a.bodies[-1]["messages"][0]["content"] == "next"


def test_past_its_length_429_past_its_time_503_both_with_retry_after(gateway_server):
    held_at_zero()
    api_key = key("lazy")
    flow = gateway_server.gateway.flow
    flow.length, flow.wait_s = 1, 1.0
    gateway_server.refresh()
    with ThreadPoolExecutor(1) as pool:
        began = time.monotonic()
        waiting = pool.submit(post, gateway_server, api_key, "lazy", "first")
        until(lambda: flow.waiting("lazy") == 1)
        full = post(gateway_server, api_key, "lazy", "second")
        assert full.status_code == 429 and int(full.headers["retry-after"]) > 0
        assert full.json()["error"]["code"] == "queue_full"
        assert set(full.json()["error"]) == {"message", "type", "param", "code"}
        timed_out = waiting.result(timeout=10)
    assert time.monotonic() - began >= 1.0
    assert timed_out.status_code == 503 and int(timed_out.headers["retry-after"]) > 0
    assert timed_out.json()["error"]["code"] == "queue_timeout"
    assert flow.waiting("lazy") == 0
    codes = gateway_server.gateway.requests["lazy"]
    assert codes == {"429": 1, "503": 1}


def test_a_model_nothing_will_start_is_503_at_once(gateway_server):
    # Neither held nor placed: waiting would only delay the same answer.
    Model.objects.create(name="cold", source="hf://x/cold")
    api_key = key("cold")
    gateway_server.refresh()
    began = time.monotonic()
    cold = post(gateway_server, api_key, "cold", "hi")
    assert cold.status_code == 503 and cold.json()["error"]["code"] == "no_ready_replica"
    assert time.monotonic() - began < 1.0 and "retry-after" in cold.headers


def test_a_client_that_hangs_up_leaves_the_queue(gateway_server, engines):
    held_at_zero()
    api_key = key("lazy")
    flow = gateway_server.gateway.flow
    gateway_server.refresh()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            gateway_server.url + "/v1/chat/completions",
            json={"model": "lazy", "messages": MESSAGES},
            headers={"authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(5, read=0.5),
        )
    until(lambda: flow.waiting("lazy") == 0)
    until(lambda: gateway_server.gateway.requests.get("lazy") == {"499": 1})
    # A replica that comes later is not sent the abandoned request.
    a = engines("a")
    replica("lazy", a.url)
    gateway_server.refresh()
    assert post(gateway_server, api_key, "lazy", "later").status_code == 200
    assert [b["messages"][0]["content"] for b in a.bodies] == ["later"]


def test_a_waiting_stream_gets_its_first_byte_from_the_engine(gateway_server, engines):
    held_at_zero()
    api_key = key("lazy")
    gateway_server.refresh()
    body = httpx.Request(
        "POST",
        gateway_server.url + "/v1/chat/completions",
        json={"model": "lazy", "messages": MESSAGES, "stream": True},
        headers={"authorization": f"Bearer {api_key}", "connection": "close"},
    )
    head = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in body.headers.items() if k != "host"
    )
    with socket.create_connection(("127.0.0.1", gateway_server.server.port)) as sock:
        sock.sendall(head.encode() + b"\r\n" + body.read())
        until(lambda: gateway_server.gateway.flow.waiting("lazy") == 1)
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1)  # no status line, no keep-alive chunk: nothing
        replica("lazy", engines("a").url)
        gateway_server.refresh()
        sock.settimeout(10)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"text/event-stream" in answer and b"a0 " in answer and b"[DONE]" in answer


def test_a_key_over_its_limits_is_told_at_once_not_queued(gateway_server):
    import redis
    from django.conf import settings

    from llmgw.serving import keys
    from llmgw.serving.gateway import limits

    client = redis.Redis.from_url(settings.REDIS_URL)
    for name in client.scan_iter(limits.PREFIX + "*"):
        client.delete(name)
    held_at_zero()
    one_at_a_time = keys.create_key(
        "one", None, ["lazy"], limits={"max_concurrent_requests": 1}
    ).key
    flow = gateway_server.gateway.flow
    flow.wait_s = 2.0
    gateway_server.refresh()
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(post, gateway_server, one_at_a_time, "lazy", "first")
        until(lambda: flow.waiting("lazy") == 1)
        # The waiting request is the key's one at a time: the next is refused
        # by the key's limit without taking a place in the model's queue.
        over = post(gateway_server, one_at_a_time, "lazy", "second")
        assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limit_exceeded"
        assert flow.waiting("lazy") == 1
        assert waiting.result(timeout=10).status_code == 503
    # The request that waited in vain gave its slot back.
    answer = post(gateway_server, one_at_a_time, "lazy", "third")
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "queue_timeout"
    client.close()
