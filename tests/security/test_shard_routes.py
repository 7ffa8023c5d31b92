"""A replica's route is the node's own address and its engine's port, never
a URL the node makes up: the gateway sends users' prompts there."""

from __future__ import annotations

import pytest

from llmgw.catalog import services as catalog
from llmgw.serving import reconciler
from llmgw.serving.gateway.snapshot import load_routes
from llmgw.serving.models import Shard
from tests.payloads import heartbeat, registration

CATALOG = """
models:
  - name: tiny
    source: hf://x/tiny
    always_running: 1
    profiles:
      - name: cpu
        memory_gb: 2
        cpu_cores: 1
"""


@pytest.fixture
def node(make_node, agent_client):
    """A node registered from 127.0.0.1 (the test client's address) with
    one shard to run."""
    _, credential = make_node("cpu-1")
    agent = agent_client(credential)
    assert agent.post("register", registration("cpu-1")).status_code == 200
    agent.post("heartbeat", heartbeat("cpu-1"))
    catalog.apply_text(CATALOG)
    reconciler.reconcile_all()
    return agent


def report(agent, url: str) -> Shard:
    [spec] = agent.post("heartbeat", heartbeat("cpu-1")).json()["desired"]["shards"]
    shard = {"id": spec["id"], "state": "ready", "url": url, "pid": 100, "generation": 1}
    answer = agent.post("heartbeat", heartbeat("cpu-1", shards=[shard]))
    assert answer.status_code == 200, answer.content
    return Shard.objects.get(replica_id=spec["replica"], rank=spec["rank"])


def routes() -> list[str]:
    return [r.url for r in load_routes()[1]]


@pytest.mark.django_db
def test_a_shard_report_cannot_point_the_route_at_another_host(node):
    shard = report(node, "http://evil.example:80")
    assert routes() == []
    assert shard.url == "" and shard.state == "failed"
    assert "http://evil.example:80" in shard.message and "127.0.0.1" in shard.message
    # The engine's real address, the one the node registered from, routes.
    report(node, "http://127.0.0.1:18000")
    assert routes() == ["http://127.0.0.1:18000"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "http://10.9.9.9:18000",  # another machine
        "http://127.0.0.1:18000@evil.example:80",  # the host is after the @
        "https://127.0.0.1:18000/steal",  # a path of the node's choosing
        "http://127.0.0.1:22",  # a privileged port: not an engine's
        "http://127.0.0.1",  # no port
    ],
)
def test_a_route_is_only_ever_the_nodes_address_and_a_port(node, url):
    shard = report(node, url)
    assert routes() == []
    assert shard.url == "" and url in shard.message
