"""/api/v1/fabrics/ports?node=NAME: a node's ports as the fabrics app keeps
them, what `ctl node` prints; text the agent did not send is null."""

from __future__ import annotations

import pytest

from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db

PORTS = [
    {
        "device": "mlx5_0",
        "port": 1,
        "link_layer": "InfiniBand",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400,
        "rate_text": "400 Gb/sec (4X NDR)",
        "fabric": "ib-a",
    },
    {"device": "mlx5_1", "port": 1},
]


def test_a_nodes_ports_with_unknown_as_null(
    make_node, agent_client, api, django_assert_num_queries
):
    _, credential = make_node("gpu-1")
    agent_client(credential).post("register", registration("gpu-1"))
    assert (
        agent_client(credential).post("heartbeat", heartbeat("gpu-1", ports=PORTS)).status_code
        < 300
    )
    # The token and its roles; the node, then its ports with their physical fabrics.
    with django_assert_num_queries(4):
        answer = api.get("/api/v1/fabrics/ports", {"node": "gpu-1"})
    assert answer.status_code == 200, answer.content
    first, second = answer.json()
    assert {k: first[k] for k in ("device", "port", "state", "rate_gbps", "declared_fabric")} == {
        "device": "mlx5_0",
        "port": 1,
        "state": "ACTIVE",
        "rate_gbps": 400,
        "declared_fabric": "ib-a",
    }
    assert first["physical_fabric"] is None  # no subnet manager said which
    assert [second[k] for k in ("state", "rate_gbps", "rate_text", "declared_fabric")] == [None] * 4


def test_ports_need_a_known_node(api):
    assert api.get("/api/v1/fabrics/ports").status_code == 400
    assert api.get("/api/v1/fabrics/ports", {"node": "nope"}).status_code == 404
    # PostgreSQL refuses NUL in a statement: a 400 that says so, not a 500.
    answer = api.get("/api/v1/fabrics/ports", {"node": "a\x00b"})
    assert answer.status_code == 400 and "NUL" in answer.json()["detail"]
