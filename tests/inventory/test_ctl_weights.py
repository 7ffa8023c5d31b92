"""`llmgw ctl status` says, for each held model, which nodes of each physical
fabric hold its weights, against a live server."""

from __future__ import annotations

import pytest
from django.utils import timezone

from llmgw.catalog import services as catalog
from llmgw.cli import ctl
from llmgw.fabrics.models import PhysicalFabric, Port
from llmgw.inventory.models import ModelHolding
from tests.tokens import make_token

CATALOG = """
models:
  - name: qwen
    source: hf://x/qwen
    always_running: 0
    under_load: 1
    profiles:
      - name: cpu
        memory_gb: 8
  - name: not-held
    source: hf://x/other
    profiles:
      - name: cpu
        memory_gb: 8
"""


@pytest.fixture
def ctl_env(live_server, operator, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))


def wire(make_node, name: str, fabric: PhysicalFabric | None, declared: str, *holds: str) -> None:
    node, _ = make_node(name)
    if fabric is not None:
        Port.objects.create(
            node=node,
            device="mlx5_0",
            port=1,
            declared_fabric=declared,
            physical_fabric=fabric,
            updated_at=timezone.now(),
        )
    for model in holds:
        ModelHolding.objects.create(node=node, model_name=model, path=f"/data/{model}")


@pytest.mark.django_db(transaction=True)
def test_status_prints_each_held_models_weights_per_fabric(make_node, ctl_env, capsys):
    catalog.apply_text(CATALOG)
    a = PhysicalFabric.objects.create(identity="0xa", kind="infiniband", last_seen=timezone.now())
    b = PhysicalFabric.objects.create(identity="0xb", kind="infiniband", last_seen=timezone.now())
    for n in range(1, 9):
        wire(make_node, f"gpu-{n:02d}", a, "ib-a", *(("qwen",) if n in (1, 2, 5) else ()))
    for n in range(9, 12):
        wire(make_node, f"gpu-{n:02d}", b, "ib-b", "not-held")
    wire(make_node, "cpu-1", None, "", "qwen")

    assert ctl.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "held      qwen  0/0 ready (always_running 0, under_load 1)\n" in out
    assert (
        "  weights: ib-a 3/8 nodes (gpu-01, gpu-02, gpu-05), ib-b none of 3, "
        "no fabric known: cpu-1\n" in out + "\n"
    ), out
    # Only held models get a line; the fleet summary stays as it was.
    assert "held      not-held" not in out
    assert "not-held on 3 node(s)" in out and out.startswith("nodes     12 (")


@pytest.mark.django_db(transaction=True)
def test_status_says_no_fabric_known_rather_than_a_count(make_node, ctl_env, capsys):
    catalog.apply_text(CATALOG)
    wire(make_node, "cpu-1", None, "")
    wire(make_node, "cpu-2", None, "")

    assert ctl.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "  weights: no fabric known: none of 2" in out, out


@pytest.mark.django_db(transaction=True)
def test_status_of_a_domain_counts_only_its_nodes_weights(make_node, ctl_env, capsys):
    """`ctl status --domain rack=r01` showed the held models' weights for the
    whole fleet under the rack's numbers."""
    from llmgw.inventory import services
    from llmgw.inventory.models import Node

    catalog.apply_text(CATALOG)
    a = PhysicalFabric.objects.create(identity="0xa", kind="infiniband", last_seen=timezone.now())
    for n in range(1, 9):
        wire(make_node, f"gpu-{n:02d}", a, "ib-a", *(("qwen",) if n in (1, 2, 5) else ()))
    wire(make_node, "cpu-1", None, "", "qwen")
    for node in Node.objects.all():
        rack = "r01" if node.name in ("gpu-01", "gpu-03", "gpu-04") else "r02"
        services.set_labels(node.name, {"llmgw.io/rack": rack}, "test")

    assert ctl.main(["status", "--domain", "rack=r01"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nodes     3 (")
    assert "  weights (within rack=r01): ib-a 1/3 nodes (gpu-01)\n" in out + "\n", out
    assert ctl.main(["status"]) == 0
    whole = capsys.readouterr().out
    assert "  weights: ib-a 3/8 nodes (gpu-01, gpu-02, gpu-05), no fabric known: cpu-1" in whole
