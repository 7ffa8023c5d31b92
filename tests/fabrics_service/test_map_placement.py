"""Placement reads the fabric map: a multi-node replica takes nodes under one
leaf when it can, nodes whose cable trained short last, and its explanation
names the fabric and the leaf.

The map arrives the way a swept one does: the node's answer to the
ibnetdiscover command goes through commands.finish. The dump is the
product's fat-tree generator (the one `llmgw simulate` answers with), two
hosts per leaf group, with the nodes' own GUIDs.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmgw.catalog import services as catalog
from llmgw.fabrics.models import FabricMap, PhysicalFabric
from llmgw.inventory import commands
from llmgw.inventory.models import Node
from llmgw.placement import services as placement
from llmgw.placement.snapshot import node_views
from llmgw.simulator.fat_tree import FatTree, Host
from llmgw.simulator.ibnetdiscover_dump import dump
from tests.fabrics_service.queued import run_queued_maps
from tests.payloads import heartbeat, registration

SM = "0x0000000000abcd01"
NAMES = ["n1", "n2", "n3", "n4", "n5"]
# n1, n2 share leaf group 0; n3, n4 group 1; n5 is alone in group 2.
TREE = FatTree(
    "ib-a",
    tuple(Host(name, 2, 0xA088C20300740000 + i * 0x10) for i, name in enumerate(NAMES)),
    hosts_per_leaf=2,
    spines=2,
    short={("adapter", "n1", "mlx5_1"): "2xNDR"},
)
PROFILE = (
    "models:\n  - name: two\n    source: x\n    profiles:\n      - name: p\n"
    "        nodes_per_replica: 2\n        fabric: ib-a\n        memory_gb: 1\n"
)


def port(host: Host, r: int) -> dict[str, Any]:
    guid = f"0x{host.adapter_guid(r):016x}"
    return {
        "device": f"mlx5_{r}", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE",
        "phys_state": "LinkUp", "rate_gbps": 200 if (host.name, r) == ("n1", 1) else 400,
        "rate_text": "4X NDR", "node_guid": guid, "port_guid": guid, "counters": {},
        "fabric": "ib-a", "sm": {"guid": SM, "lid": 1, "priority": 10, "state": "MASTER"},
    }  # fmt: skip


def joined(make_node: Any, agent_client: Any) -> None:
    for host in TREE.hosts:
        _, credential = make_node(host.name)
        agent = agent_client(credential)
        fabrics = [{"name": "ib-a", "adapters": ["mlx5_0", "mlx5_1"]}]
        answer = agent.post("register", registration(host.name, fabrics=fabrics))
        assert answer.status_code == 200
        ports = [port(host, r) for r in range(host.adapters)]
        assert agent.post("heartbeat", heartbeat(host.name, ports=ports)).status_code == 200


def answered(fabric: PhysicalFabric, capture: Any) -> int:
    """n1 asked for the map and its answer heard, committed; the command's key."""
    n1 = Node.objects.get(name="n1")
    command = commands.send(n1, "ibnetdiscover", {"fabric_id": fabric.pk})
    commands.claim(n1.pk)
    output = dump(TREE, ("n1", "mlx5_0"))
    with capture(execute=True):
        commands.finish(n1.pk, {"id": command.pk, "ok": True, "output": output})
    return command.pk


def parsed_by_a_worker(fabric: PhysicalFabric, command_id: int) -> None:
    """Heard and stored, not parsed: the map waits for a worker, and is
    there once the queued message is taken as a worker takes it."""
    assert not FabricMap.objects.filter(fabric=fabric, analysis__isnull=False).exists()
    assert run_queued_maps() == [command_id]
    assert FabricMap.objects.get(fabric=fabric).analysis["summary"]["degraded_links"] == 1


@pytest.fixture
def mapped(
    make_node: Any, agent_client: Any, django_capture_on_commit_callbacks: Any
) -> PhysicalFabric:
    joined(make_node, agent_client)
    fabric = PhysicalFabric.objects.get()
    parsed_by_a_worker(fabric, answered(fabric, django_capture_on_commit_callbacks))
    catalog.apply_text(PROFILE)
    return fabric


def leaf(fabric: PhysicalFabric, name: str) -> str:
    switches = FabricMap.objects.get(fabric=fabric).analysis["switches"]
    return next(s["guid"] for s in switches if s["description"] == name)


def test_the_views_carry_each_nodes_leaf_and_short_cables(mapped: PhysicalFabric) -> None:
    key = f"ib-a@{SM}"
    views = {v.name: v for v in node_views()}
    # Each node's adapters are on two leaves (one per rail): its leaf is its mlx5_0's.
    assert {n: views[n].fabric_leaves for n in NAMES} == {
        "n1": {key: leaf(mapped, "ib-a-leaf-r0-g0")},
        "n2": {key: leaf(mapped, "ib-a-leaf-r0-g0")},
        "n3": {key: leaf(mapped, "ib-a-leaf-r0-g1")},
        "n4": {key: leaf(mapped, "ib-a-leaf-r0-g1")},
        "n5": {key: leaf(mapped, "ib-a-leaf-r0-g2")},
    }
    assert {n for n in NAMES if views[n].degraded_fabrics} == {"n1"}
    assert views["n1"].degraded_fabrics == frozenset({key})


def test_one_leaf_first_and_the_explanation_names_fabric_and_leaf(
    mapped: PhysicalFabric,
) -> None:
    result = placement.dry_run("two")
    decision = result.decision
    assert decision is not None
    # Leaf group 0 has a short cable (n1's); group 1 is whole and clean.
    assert decision.nodes == ("n3", "n4") and decision.fabric == f"ib-a@{SM}"
    assert decision.leaf == leaf(mapped, "ib-a-leaf-r0-g1") and decision.short_cabled == ()
    route = placement.route_text(decision)
    assert f"over fabric ib-a@{SM}" in route
    assert f"under one leaf switch, ib-a-leaf-r0-g1 ({decision.leaf})" in route
    text = placement.explanation_data(result)["text"]
    assert text.startswith(route)
    assert f"took n3, n4 under leaf {decision.leaf}" in text


def test_short_cabled_nodes_come_last(mapped: PhysicalFabric) -> None:
    # No leaf has two free nodes: n1 (short cable), n4 and n5 are left.
    Node.objects.filter(name__in=["n2", "n3"]).update(cordoned=True)
    decision = placement.dry_run("two").decision
    assert decision is not None and set(decision.nodes) == {"n4", "n5"}
    assert decision.leaf is None
    # Only n1 and n5 left: it has to take the short cable, and says so.
    Node.objects.filter(name="n4").update(cordoned=True)
    decision = placement.dry_run("two").decision
    assert decision is not None and set(decision.nodes) == {"n1", "n5"}
    assert decision.short_cabled == ("n1",)
    assert "n1 taken although a cable trained short" in placement.route_text(decision)


def test_an_answer_is_parsed_by_a_worker_not_by_the_web_process_that_heard_it(
    mapped: PhysicalFabric,
) -> None:
    """The map every test here reads was made as in production: n1's
    answer, heard and committed, left no map until a worker took the
    queued message (the fixture's parsed_by_a_worker); one message, one map."""
    assert FabricMap.objects.get(fabric=mapped).source_node == "n1"
    assert run_queued_maps() == []
