# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""A model held only under load (always_running 0, under_load 2) starts
from nothing: the requests waiting in the gateway's queue for want of a
replica are its load (and those it refused, while their clients wait to
retry), they reach the reconciler through the shared load figures, summed
over the web processes, and the reconciler places the first replica on its
next tick; when that replica is ready the waiting requests are served."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.core.cache import cache

from llmgw.catalog import services as catalog
from llmgw.serving import keys, reconciler, tasks
from llmgw.serving.choices import ReplicaState
from llmgw.serving.gateway import load
from llmgw.serving.models import HeldState, Replica, Shard
from tests.payloads import heartbeat, registration
from tests.servers import ServerThread
from tests.serving.gateway_peers import GatewayServer, engines, gateway_server  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

CATALOG = """
engines:
  llama.cpp:
    version: b11434
    default: true
    builds:
      ubuntu-x64: {url: "http://127.0.0.1:9/llama-b11434-bin-ubuntu-x64.tar.gz", sha256: "%s"}
models:
  - name: lazy
    source: hf://x/lazy
    always_running: 0
    under_load: 2
    profiles:
      - name: cpu
        memory_gb: 2
        cpu_cores: 1
""" % ("ab" * 32)
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fleet(make_node, agent_client):
    _, credential = make_node("cpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("cpu-1"))
    agent.post("heartbeat", heartbeat("cpu-1"))
    catalog.apply_text(CATALOG)
    cache.clear()


def lazy_key() -> str:
    return keys.create_key(f"k{time.monotonic_ns()}", None, ["lazy"]).key


def ask(gw: Any, api_key: str) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": "lazy", "messages": MESSAGES},
        headers={"authorization": f"Bearer {api_key}"},
        timeout=30,
    )


def wait_for(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


@pytest.fixture
def second_process(transactional_db: Any) -> Iterator[GatewayServer]:
    """Another web process's gateway: its own queue, its own load report."""
    from django.core.asgi import get_asgi_application

    from llmgw.serving.gateway.app import Gateway, mount

    gateway = Gateway(background=False)
    server = ServerThread(mount(gateway, get_asgi_application())).start()
    yield GatewayServer(gateway, server)
    server.call(gateway.stop())
    server.stop()


def publish_as(gw: GatewayServer, process: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "process_id", lambda: process)
    gw.publish()


def test_requests_waiting_in_two_processes_place_the_first_replica_and_are_served(
    fleet, gateway_server, second_process, engines, monkeypatch
):
    reconciler.reconcile_all()
    assert Replica.objects.count() == 0  # no load, nothing held
    api_key = lazy_key()
    one, two = gateway_server, second_process
    one.refresh()
    two.refresh()
    with ThreadPoolExecutor(3) as pool:
        sent = [pool.submit(ask, one, api_key), pool.submit(ask, one, api_key)]
        sent.append(pool.submit(ask, two, api_key))
        wait_for(lambda: one.gateway.flow.waiting("lazy") == 2)
        wait_for(lambda: two.gateway.flow.waiting("lazy") == 1)
        publish_as(one, "web-1", monkeypatch)
        publish_as(two, "web-2", monkeypatch)
        # Each process counts its own queue once: the sum is every request.
        assert load.queue_depth("lazy") == 3.0
        # And asked the reconciler to look now rather than at its next tick.
        assert cache.get(tasks.SOON_KEY) == 1
        reconciler.reconcile_all()
        # At once: with no replica there is no burst to wait out.
        placed = Replica.objects.get(model__name="lazy")
        assert HeldState.objects.get(model__name="lazy").target == 1
        assert not any(f.done() for f in sent)
        # The agent reports the engine up: ready at its URL.
        engine = engines("a")
        Shard.objects.filter(replica=placed).update(url=engine.url, state=ReplicaState.READY)
        Replica.objects.filter(pk=placed.pk).update(state=ReplicaState.READY)
        one.refresh()
        two.refresh()
        assert [f.result(timeout=10).status_code for f in sent] == [200, 200, 200]
    assert engine.hits == 3


def test_a_refused_request_counts_as_load_while_its_client_waits(fleet, gateway_server):
    # A queue of no length refuses at once (429). The client was told to
    # retry in a few seconds; the publishes of the seconds in between (and
    # the reconciler's tick after them) still see it.
    gateway_server.gateway.flow.length = 0
    api_key = lazy_key()
    gateway_server.refresh()
    refused = ask(gateway_server, api_key)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
    gateway_server.publish()
    gateway_server.publish()
    assert load.queue_depth("lazy") == 1.0
    reconciler.reconcile_all()
    assert Replica.objects.filter(model__name="lazy").count() == 1
