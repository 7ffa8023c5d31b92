"""Which nodes hold a model's weights, per physical fabric, as the model API
answers it: the nodes holding it on each fabric, the fabric's size, and the
nodes on no known fabric grouped as such, at a query count that does not
grow with the fleet."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from llmgw.catalog import services as catalog
from llmgw.fabrics.models import PhysicalFabric, Port
from llmgw.inventory.models import ModelHolding

CATALOG = """
models:
  - name: qwen
    source: hf://x/qwen
    always_running: 0
    under_load: 1
    profiles:
      - name: cpu
        memory_gb: 8
  - name: other
    source: hf://x/other
    profiles:
      - name: cpu
        memory_gb: 8
"""


@pytest.fixture
def wired(make_node):
    """Nodes on physical fabrics by their ports, as the fabrics app stores
    them once a subnet manager answered; holdings as a heartbeat stores them."""
    fabrics: dict[str, PhysicalFabric] = {}

    def add(name: str, fabric: tuple[str, str] | None = None, holds: tuple[str, ...] = ()) -> None:
        node, _ = make_node(name)
        if fabric:
            identity, declared = fabric
            if identity not in fabrics:
                fabrics[identity] = PhysicalFabric.objects.create(
                    identity=identity, kind="infiniband", last_seen=timezone.now()
                )
            for device in ("mlx5_0", "mlx5_1"):
                Port.objects.create(
                    node=node,
                    device=device,
                    port=1,
                    state="ACTIVE",
                    phys_state="LinkUp",
                    declared_fabric=declared,
                    physical_fabric=fabrics[identity],
                    updated_at=timezone.now(),
                )
        for model in holds:
            ModelHolding.objects.create(node=node, model_name=model, path=f"/data/{model}")

    catalog.apply_text(CATALOG)
    return add


def by_label(entries: list[dict]) -> dict[str, dict]:
    return {e["label"]: e for e in entries}


def test_each_fabric_says_which_of_its_nodes_hold_the_weights(wired, api):
    wired("gpu-01", ("0xa", "ib-a"), ("qwen",))
    wired("gpu-02", ("0xa", "ib-a"), ("qwen", "other"))
    wired("gpu-03", ("0xa", "ib-a"))
    wired("gpu-04", ("0xb", "ib-b"), ("other",))
    wired("gpu-05", ("0xb", "ib-b"))
    wired("cpu-1", None, ("qwen",))
    wired("cpu-2")

    model = api.get("/api/v1/models/qwen").json()
    # The existing fields are all still there.
    assert {"name", "source", "weights", "profiles", "replicas", "headroom"} <= set(model)
    fabrics = by_label(model["weights_by_fabric"])
    assert list(fabrics) == ["ib-a", "ib-b", "no fabric known"]
    assert fabrics["ib-a"] == {
        "fabric": "0xa",
        "label": "ib-a",
        "kind": "infiniband",
        "names": ["ib-a"],
        "nodes": 3,
        "holders": ["gpu-01", "gpu-02"],
    }
    # A fabric where no node holds it: a replica there downloads first.
    assert fabrics["ib-b"]["holders"] == [] and fabrics["ib-b"]["nodes"] == 2
    # Not counted on any fabric: said as such.
    nowhere = fabrics["no fabric known"]
    assert nowhere["fabric"] is None and nowhere["kind"] is None
    assert nowhere["nodes"] == 2 and nowhere["holders"] == ["cpu-1"]

    listed = {m["name"]: m for m in api.get("/api/v1/models").json()}
    assert listed["qwen"]["weights_by_fabric"] == model["weights_by_fabric"]
    other = by_label(listed["other"]["weights_by_fabric"])
    assert other["ib-a"]["holders"] == ["gpu-02"] and other["ib-b"]["holders"] == ["gpu-04"]
    assert other["no fabric known"]["holders"] == []


def test_a_name_over_two_fabrics_is_labelled_with_each_identity(wired, api):
    wired("gpu-01", ("0xa", "ib-a"), ("qwen",))
    wired("gpu-02", ("0xc", "ib-a"))
    fabrics = by_label(api.get("/api/v1/models/qwen").json()["weights_by_fabric"])
    # Both fabrics are "ib-a" in agent.yaml; only the identity tells them apart.
    assert set(fabrics) == {"ib-a@0xa", "ib-a@0xc"}
    assert fabrics["ib-a@0xa"]["holders"] == ["gpu-01"]
    assert "no fabric known" not in fabrics


def test_the_query_count_does_not_grow_with_the_fleet(wired, api, django_assert_num_queries):
    wired("gpu-01", ("0xa", "ib-a"), ("qwen",))
    wired("cpu-1", None, ("qwen",))
    # The list pays four queries for every model's weights together:
    # nodes, ports, fabrics, holdings.
    with django_assert_num_queries(LIST_QUERIES):
        assert api.get("/api/v1/models").status_code == 200
    with CaptureQueriesContext(connection) as small:
        api.get("/api/v1/models/qwen")
    for n in range(2, 12):
        wired(f"gpu-{n:02d}", ("0xa" if n % 2 else "0xb", "ib-a" if n % 2 else "ib-b"), ("qwen",))
        wired(f"cpu-{n}", None, ("other",))
    with django_assert_num_queries(LIST_QUERIES):
        assert api.get("/api/v1/models").status_code == 200
    with CaptureQueriesContext(connection) as large:
        api.get("/api/v1/models/qwen")
    assert len(large) == len(small)


# Five the list made before (the token, the models and their prefetches),
# and the four of the weights.
LIST_QUERIES = 9
