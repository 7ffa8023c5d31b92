# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""A model held only under load (always_running 0, under_load 2) starts
from nothing: the requests the gateway refuses for want of a replica are
its load, they reach the reconciler through the shared load figures, and
the reconciler places the first replica on its next tick."""

from __future__ import annotations

import time

import openai
import pytest
from django.core.cache import cache

from llmgw.catalog import services as catalog
from llmgw.serving import keys, reconciler
from llmgw.serving.gateway import load
from llmgw.serving.models import HeldState, Replica
from tests.payloads import heartbeat, registration
from tests.serving.gateway_peers import engines, gateway_server  # noqa: F401

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


def refused(gateway_server) -> None:
    oa = openai.OpenAI(
        base_url=gateway_server.url + "/v1",
        api_key=keys.create_key(f"k{time.monotonic_ns()}", None, ["lazy"]).key,
        max_retries=0,
        timeout=20,
    )
    gateway_server.refresh()
    with pytest.raises(openai.InternalServerError) as no_replica:
        oa.chat.completions.create(model="lazy", messages=MESSAGES)
    assert no_replica.value.code == "no_ready_replica"


def test_load_on_a_model_with_no_replica_places_one(fleet, gateway_server):
    reconciler.reconcile_all()
    assert Replica.objects.count() == 0  # no load, nothing held
    refused(gateway_server)
    gateway_server.publish()
    assert load.queue_depth("lazy") == 1.0
    reconciler.reconcile_all()
    # At once: with no replica there is no burst to wait out.
    assert Replica.objects.filter(model__name="lazy").count() == 1
    assert HeldState.objects.get(model__name="lazy").target == 1


def test_a_refused_request_counts_as_load_while_its_client_waits(fleet, gateway_server):
    # The client was told to retry in a few seconds; the publishes of the
    # seconds in between (and the reconciler's tick after them) still see it.
    refused(gateway_server)
    gateway_server.publish()
    gateway_server.publish()
    assert load.queue_depth("lazy") == 1.0
    reconciler.reconcile_all()
    assert Replica.objects.filter(model__name="lazy").count() == 1
