"""A node that dies (its agent and engines with it) has its replicas
replaced elsewhere: no routing to it from the moment it is NotReady, lost
and placed again in the reconciler's next tick."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from llmgw.catalog import services as catalog
from llmgw.inventory import heartbeats
from llmgw.inventory import services as inventory
from llmgw.inventory.models import Node
from llmgw.serving import reconciler
from llmgw.serving.gateway.snapshot import load_routes
from llmgw.serving.models import Replica, Shard
from tests.payloads import heartbeat, registration

CATALOG = """
models:
  - name: held
    source: hf://x/held
    always_running: 1
    profiles:
      - name: cpu
        memory_gb: 1
        cpu_cores: 1
"""


@pytest.fixture
def fleet(make_node, agent_client):
    agents = {}
    for name in ("cpu-1", "cpu-2"):
        _, credential = make_node(name)
        agents[name] = agent_client(credential)
        agents[name].post("register", registration(name))
        agents[name].post("heartbeat", heartbeat(name))
    catalog.apply_text(CATALOG)
    return agents


def ready(agent, name: str, shards: list[Shard], port: int = 18000) -> None:
    reports = [
        {"id": s.shard_id, "state": "ready", "url": f"http://127.0.0.1:{port}", "pid": 7,
         "restarts": 0, "generation": s.generation, "message": ""}
        for s in shards
    ]  # fmt: skip
    assert agent.post("heartbeat", heartbeat(name, shards=reports)).status_code == 200


@pytest.mark.django_db
def test_a_dead_nodes_replica_is_not_routed_to_and_is_replaced_elsewhere(fleet) -> None:
    reconciler.reconcile_all()
    first = Replica.objects.get()
    shard = first.shards.get()
    dead, alive = shard.node.name, ({"cpu-1", "cpu-2"} - {shard.node.name}).pop()
    ready(fleet[dead], dead, [shard])
    assert [r.replica_id for r in load_routes()[1]] == [first.pk]

    # The agent and its engine die together: no more heartbeats. The
    # staleness check, past the grace, marks the node NotReady.
    later = timezone.now() + timedelta(minutes=5)
    heartbeats.heartbeat(Node.objects.get(name=alive), heartbeat(alive), now=later)
    assert inventory.mark_missed_heartbeats(now=later) == [dead]
    assert load_routes()[1] == (), "still routed to a NotReady node"

    done = reconciler.reconcile_all()["held"]
    assert done["released"] == [first.pk] and len(done["placed"]) == 1
    again = Replica.objects.get()
    assert again.pk != first.pk and again.shards.get().node.name == alive


@pytest.mark.django_db
def test_a_lost_shard_says_when_and_why(fleet) -> None:
    from llmgw.serving import lost

    reconciler.reconcile_all()
    shard = Shard.objects.get()
    ready(fleet[shard.node.name], shard.node.name, [shard])
    inventory.mark_missed_heartbeats(now=timezone.now() + timedelta(minutes=5))
    assert lost.mark_lost() == [shard.replica_id]
    shard.refresh_from_db()
    assert shard.state == "lost"
    assert f"node {shard.node.name} stopped reporting (last heartbeat" in shard.message
    assert Replica.objects.get().state == "lost"
