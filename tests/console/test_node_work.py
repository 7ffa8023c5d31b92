"""What the node page says runs on its node: each replica's shard with the
use its agent measured (unknown, never 0, when not measured or too old),
each engine's sum, and the route its prompts take or why none."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from llmgw.catalog import services as catalog
from llmgw.console import node_work
from llmgw.inventory.models import Node
from llmgw.serving import services as serving
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db

CATALOG = """
models:
  - name: a
    source: hf://x/a
    profiles:
      - name: cpu
        memory_gb: 8
        cpu_cores: 2
  - name: b
    source: hf://x/b
    profiles:
      - name: cpu
        memory_gb: 4
        cpu_cores: 1
"""
LLAMA = {"name": "llama.cpp", "version": "b1", "status": "installed", "message": ""}


@pytest.fixture
def placed(make_node, agent_client):
    """a and b placed on cpu-1 (the only node), their shards not measured yet."""
    _, credential = make_node("cpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("cpu-1"))
    agent.post("heartbeat", heartbeat("cpu-1"))
    catalog.apply_text(CATALOG)
    replicas = [serving.place_by_hand(m)[0] for m in ("a", "b")]
    assert all(replicas)
    return agent, replicas


def report(agent, shards):
    answer = agent.post("heartbeat", heartbeat("cpu-1", shards=shards))
    assert answer.status_code == 200, answer.content


def test_each_replica_with_its_measured_use_and_reservation(placed):
    agent, (a, b) = placed
    address = Node.objects.get(name="cpu-1").address
    url = f"http://{address}:18123"
    report(
        agent,
        [
            {"id": f"r{a.pk}-0", "replica": a.pk, "state": "ready", "url": url,
             "cpu_cores": 1.5, "memory_bytes": 6 * 2**30},
            # Running, but the agent did not measure it.
            {"id": f"r{b.pk}-0", "replica": b.pk, "state": "loading"},
        ],
    )  # fmt: skip
    node, now = Node.objects.get(name="cpu-1"), timezone.now()
    rows = {r["model"]: r for r in node_work.replicas(node, now, True)}
    assert rows["a"]["cpu_cores"] == 1.5 and rows["a"]["memory_bytes"] == 6 * 2**30
    assert rows["a"]["reserved_cores"] == 2 and rows["a"]["reserved_memory_bytes"] == 8 * 2**30
    assert rows["a"]["profile"] == "cpu" and rows["a"]["gpus"] == []
    assert rows["a"]["state"] == "ready"
    assert rows["b"]["cpu_cores"] is None and rows["b"]["memory_bytes"] is None
    assert rows["b"]["state"] == "loading"
    assert rows["b"]["route"] == "not routed: not listening yet"

    [engine] = node_work.engine_use([LLAMA], list(rows.values()))
    # b unmeasured: the sum of a alone is not the engine's use.
    assert engine["shards"] == 2 and engine["cpu_cores"] is None and engine["memory_bytes"] is None
    [engine] = node_work.engine_use([LLAMA], [rows["a"]])
    assert engine["cpu_cores"] == 1.5 and engine["memory_bytes"] == 6 * 2**30
    # An engine nothing runs on uses nothing known: no shard, not 0.
    [idle] = node_work.engine_use([{**LLAMA, "name": "vllm"}], list(rows.values()))
    assert idle["shards"] == 0 and idle["cpu_cores"] is None


def test_a_stale_heartbeat_measures_nothing(placed, settings):
    agent, (a, _) = placed
    report(agent, [{"id": f"r{a.pk}-0", "replica": a.pk, "state": "ready", "cpu_cores": 1.0}])
    node = Node.objects.get(name="cpu-1")
    later = timezone.now() + timedelta(seconds=settings.MEASUREMENT_MAX_AGE_S + 1)
    [row] = [r for r in node_work.replicas(node, later, True) if r["model"] == "a"]
    assert row["cpu_cores"] is None


def test_the_route_says_where_prompts_go_or_why_not(placed):
    agent, (a, _) = placed
    address = Node.objects.get(name="cpu-1").address
    report(agent, [{"id": f"r{a.pk}-0", "replica": a.pk, "state": "ready",
                    "url": f"http://{address}:18123"}])  # fmt: skip
    a.refresh_from_db()
    node, now = Node.objects.get(name="cpu-1"), timezone.now()
    [row] = [r for r in node_work.replicas(node, now, True) if r["model"] == "a"]
    assert a.state == "ready" and row["route"] == f"http://{address}:18123"
    [row] = [r for r in node_work.replicas(node, now, False) if r["model"] == "a"]
    assert row["route"].startswith("not routed: ")


def test_a_shard_past_rank_0_names_the_node_that_serves_it() -> None:
    from llmgw.serving.models import Replica, Shard

    replica = Replica(fabric="ib-a", state="ready")
    ranks = [(0, "h100-01"), (1, "h100-02")]
    second = Shard(replica=replica, rank=1, url="")
    assert node_work.route(second, ranks, True) == "rank 1 of 2 over ib-a, served through h100-01"
    first = Shard(replica=replica, rank=0, url="http://10.0.0.5:18123")
    assert node_work.route(first, ranks, True) == "http://10.0.0.5:18123 (rank 0 of 2 over ib-a)"
