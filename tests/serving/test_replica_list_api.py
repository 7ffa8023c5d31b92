"""/api/v1/replicas?node=NAME: the replicas with a shard on a node, what
`ctl node` prints of its work; a viewer may read it."""

from __future__ import annotations

import pytest

from llmgw.catalog import services as catalog
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
        memory_gb: 8
        cpu_cores: 2
"""


@pytest.fixture
def placed(make_node, agent_client):
    for name in ("cpu-1", "cpu-2"):
        _, credential = make_node(name)
        agent_client(credential).post("register", registration(name))
        agent_client(credential).post("heartbeat", heartbeat(name))
    catalog.apply_text(CATALOG)
    # Spread over nodes: a on cpu-1, a's second and b's first apart.
    replicas = [serving.place_by_hand(m)[0] for m in ("a", "a", "b")]
    return {r.pk: r.shards.get().node.name for r in replicas}


def test_replicas_on_a_node_with_their_model(placed, api, django_assert_num_queries):
    # The token and its roles; the node, the replicas with their model and
    # profile, their shards, the shards' nodes.
    with django_assert_num_queries(6):
        answer = api.get("/api/v1/replicas", {"node": "cpu-1"})
    assert answer.status_code == 200, answer.content
    got = answer.json()
    assert sorted(r["id"] for r in got) == sorted(pk for pk, n in placed.items() if n == "cpu-1")
    assert {r["model"] for r in got} <= {"a", "b"} and got
    shard = got[0]["nodes"][0]
    assert shard["node"] == "cpu-1" and shard["reserved_cores"] == 2
    assert shard["reserved_memory_bytes"] == 8 * 2**30
    # Not measured yet: unknown, not zero.
    assert shard["cpu_cores"] is None and shard["memory_bytes"] is None


def test_replicas_of_a_model_and_of_an_unknown_node(placed, api):
    assert {r["model"] for r in api.get("/api/v1/replicas", {"model": "b"}).json()} == {"b"}
    assert len(api.get("/api/v1/replicas").json()) == 3
    answer = api.get("/api/v1/replicas", {"node": "nope"})
    assert answer.status_code == 404 and "nope" in answer.json()["detail"]


def test_a_nul_in_a_filter_is_refused_not_a_server_error(api):
    for key in ("node", "model"):
        answer = api.get("/api/v1/replicas", {key: "a\x00b"})
        assert answer.status_code == 400 and "NUL" in answer.json()["detail"], answer.content
