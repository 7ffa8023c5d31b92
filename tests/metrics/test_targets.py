"""/metrics/fleet and /metrics/nodes?shard=i&of=N: between them, exactly
what /metrics answers whole, each node's series in one shard only, and the
fleet's own series on the fleet target alone."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from llmgw.catalog import services as catalog
from llmgw.inventory import heartbeats, services
from llmgw.inventory.models import Node
from llmgw.simulator.fleet import make_fleet
from tests.metrics_text import samples
from tests.tokens import make_token

Samples = dict[str, dict[tuple, float]]
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "server.example.yaml"


@pytest.fixture
def fleet(db) -> list[str]:
    """Seven simulated nodes of every shape (GPUs, ports, filesystems,
    collectors), registered and beating through the inventory's services,
    and the example catalog."""
    catalog.apply_text(EXAMPLE.read_text())
    names = []
    for i, sim in enumerate(make_fleet(7, prefix="shard")):
        services.join(sim.name, services.add_node(sim.name, "test"))
        node = services.register(
            Node.objects.get(name=sim.name),
            msgspec.to_builtins(sim.registration(10)),
            f"10.0.0.{i + 1}",
        )
        heartbeats.heartbeat(node, msgspec.to_builtins(sim.heartbeat()))
        names.append(sim.name)
    return names


def get(api, path: str) -> Samples:
    response = api.get(path)
    assert response.status_code == 200, response.content
    return samples(response.content.decode())


def merge(*parts: Samples) -> Samples:
    out: Samples = {}
    for part in parts:
        for name, series in part.items():
            for key, value in series.items():
                assert key not in out.get(name, {}), f"{name}{key} in two targets"
                out.setdefault(name, {})[key] = value
    return out


def nodes_in(part: Samples) -> set[str]:
    return {
        dict(key)["node"] for series in part.values() for key in series if dict(key).get("node")
    }


def volatile(part: Samples) -> Samples:
    # A card's wear age grows between two scrapes.
    return {name: s for name, s in part.items() if name != "llmgw_gpu_wear_age_seconds"}


def test_the_shards_and_the_fleet_target_add_up_to_the_whole(fleet, api):
    whole = get(api, "/metrics")
    shards = [get(api, f"/metrics/nodes?shard={i}&of=3") for i in range(3)]
    own = get(api, "/metrics/fleet")
    assert volatile(merge(*shards, own)) == volatile(whole)
    assert volatile(merge(*shards)) == volatile(get(api, "/metrics/nodes"))
    # Each node in the shard its id names, and only there.
    ids = dict(Node.objects.values_list("name", "id"))
    for i, part in enumerate(shards):
        assert nodes_in(part) == {n for n in fleet if ids[n] % 3 == i}
    assert nodes_in(own) == set()
    assert "llmgw_model_replicas" in own and "llmgw_fabric_problems" in own
    assert "llmgw_gpu_info" in whole and "llmgw_ib_port_active" in whole
    assert len(whole["llmgw_node_up"]) == 7


def test_one_shard_of_one_is_every_node(fleet, api):
    assert nodes_in(get(api, "/metrics/nodes?shard=0&of=1")) == set(fleet)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("shard=0", "shard and of go together"),
        ("of=4", "shard and of go together"),
        ("shard=a&of=4", "whole numbers"),
        ("shard=4&of=4", "shard: 4 is not between 0 and 3"),
        ("shard=-1&of=4", "shard: -1 is not between 0 and 3"),
        ("shard=0&of=0", "of: 0 is not between 1 and 1024"),
        ("shard=0&of=5000", "of: 5000 is not between 1 and 1024"),
    ],
)
def test_a_bad_shard_is_refused_naming_the_parameter(db, api, query, says):
    response = api.get(f"/metrics/nodes?{query}")
    assert response.status_code == 400
    assert says in response.content.decode()


def test_every_target_wants_a_token_that_may_scrape(db, operator, client):
    from django.contrib.auth.models import User

    nobody = make_token(User.objects.create_user("nobody", password="a-long-password"))
    for path in ("/metrics", "/metrics/fleet", "/metrics/nodes", "/metrics/nodes?shard=0&of=2"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, HTTP_AUTHORIZATION="Bearer nope").status_code == 401, path
        assert client.get(path, HTTP_AUTHORIZATION=f"Bearer {nobody}").status_code == 403, path
        ok = client.get(path, HTTP_AUTHORIZATION=f"Bearer {make_token(operator)}")
        assert ok.status_code == 200, path
    # The parameters are looked at only once the caller may scrape.
    assert client.get("/metrics/nodes?shard=9&of=2").status_code == 401
