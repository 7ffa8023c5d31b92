"""The NVLink API names the replicas each tray carries, as serving stores
them (asked through llmgw/holdings.py)."""

from __future__ import annotations

import pytest

from llmgw.catalog import services as catalog
from llmgw.serving import placing
from llmgw.serving.models import Shard
from tests.nvlink.test_domains import GB200_MODEL, rack  # noqa: F401  # the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_tray_lists_the_replicas_it_carries(rack, api):  # noqa: F811
    [domain] = api.get("/api/v1/nvlink").json()["domains"]
    assert all(t["replicas"] == [] for t in domain["trays"])

    catalog.apply_text(GB200_MODEL)
    replica, result = placing.place_replica("big")
    assert replica is not None, result.explanation.render()
    [domain] = api.get("/api/v1/nvlink").json()["domains"]
    carrying = {t["node"]: t["replicas"] for t in domain["trays"] if t["replicas"]}
    shards = {s.node.name: s for s in Shard.objects.filter(replica=replica).select_related("node")}
    assert set(carrying) == set(shards) and len(shards) == 4
    for node, [listed] in carrying.items():
        assert listed == {
            "id": replica.pk,
            "model": "big",
            "state": replica.state,
            "gpus": shards[node].gpu_indices,
        }
