"""A heartbeat's answer carries the node's desired state only when it
changed since the digest the agent sent back, on both heartbeat paths."""

from __future__ import annotations

import json

import pytest

from llmgw.catalog import services as catalog
from llmgw.inventory.models import Node
from llmgw.serving import desired, placing
from tests.inventory.test_heartbeat_asgi import call
from tests.payloads import heartbeat, registration
from tests.serving.test_reconciler import CATALOG

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cpu1(make_node, agent_client):
    _, credential = make_node("cpu-1")
    agent = agent_client(credential)
    # Nothing held: only a placement by hand puts a shard here.
    catalog.apply_text(CATALOG.replace("always_running: 2", "always_running: 0"))
    assert agent.post("register", registration("cpu-1")).status_code == 200
    return agent, credential


def beat(agent, digest: str | None = None) -> dict:
    extra = {} if digest is None else {"desired_digest": digest}
    response = agent.post("heartbeat", heartbeat("cpu-1", **extra))
    assert response.status_code == 200, response.content
    return response.json()


def test_an_unchanged_desired_state_is_not_sent_again(cpu1):
    agent, _ = cpu1
    first = beat(agent)
    node = Node.objects.get(name="cpu-1")
    assert first["desired"] == node.desired and first["desired"]["engines"]
    assert first["desired_digest"] == node.desired_digest == desired.digest(node.desired)
    again = beat(agent, first["desired_digest"])
    assert "desired" not in again
    assert again["desired_digest"] == first["desired_digest"]


def test_a_placement_is_sent_on_the_next_heartbeat(cpu1):
    agent, _ = cpu1
    held = beat(agent)["desired_digest"]
    replica, _ = placing.place_replica("tiny")
    assert replica is not None
    answer = beat(agent, held)
    assert answer["desired_digest"] != held
    [shard] = answer["desired"]["shards"]
    assert shard["replica"] == replica.pk
    assert "desired" not in beat(agent, answer["desired_digest"])


def test_an_agent_that_sends_no_digest_gets_it_in_full(cpu1):
    agent, _ = cpu1
    first = beat(agent)
    beat(agent, first["desired_digest"])
    # Restarted: it holds nothing, so it says nothing.
    assert beat(agent)["desired"] == first["desired"]
    # A digest the node has never had (an older desired state) is no match either.
    assert beat(agent, "0" * 64)["desired"] == first["desired"]


@pytest.mark.parametrize("held", [False, True])
def test_the_lean_path_answers_as_django_does(cpu1, held):
    agent, credential = cpu1
    digest = beat(agent)["desired_digest"] if held else None
    extra = {} if digest is None else {"desired_digest": digest}
    done = call(json.dumps(heartbeat("cpu-1", **extra)).encode(), credential)
    assert done["handed"] == []
    lean = json.loads(done["sent"][1]["body"])
    assert lean == beat(agent, digest)
    assert ("desired" in lean) is not held
