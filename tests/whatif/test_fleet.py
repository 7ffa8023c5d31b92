"""What-if on plain views: which replicas a domain takes with it, where each
goes again, which cannot and why, and which domains a sweep names."""

from __future__ import annotations

import pytest

from llmgw.placement.types import Decision, Shard
from llmgw.placement.whatif import Fleet, HeldReplica, WhatIfError, fail, resolve, sweep
from tests.placement.helpers import gpu_node, gpu_profile

GiB = 2**30


def labels(rack: str, pdu: str) -> dict[str, str]:
    return {"llmgw.io/rack": rack, "llmgw.io/pdu": pdu, "llmgw.io/site": "s1"}


def replica(rid: int, model: str, node: str, gpus: tuple[int, ...]) -> HeldReplica:
    shard = Shard(node, gpus, (), (), 0, 0, False)
    return HeldReplica(rid, Decision(model, "gpu", (shard,)))


def build(nodes, replicas, always=None, gpus_per_shard=4) -> Fleet:
    """Nodes as (name, rack, pdu, free GPUs); replicas already allocated."""
    held: dict[str, list[int]] = {}
    for r in replicas:
        for s in r.decision.shards:
            held.setdefault(s.node, []).extend(s.gpu_indices)
    views = []
    for name, rack, pdu in nodes:
        models: dict[str, int] = {}
        for r in replicas:
            if name in r.decision.nodes:
                models[r.model] = models.get(r.model, 0) + 1
        views.append(
            gpu_node(
                name,
                8,
                allocated=tuple(held.get(name, ())),
                labels=labels(rack, pdu),
                models=models,
            )
        )
    profiles = {"m": [gpu_profile("gpu", gpus_per_shard)]}
    return Fleet(views, list(replicas), profiles, always or {"m": len(replicas)})


NODES = [("a1", "r1", "p1"), ("a2", "r1", "p2"), ("b1", "r2", "p1"), ("b2", "r2", "p2")]


def test_a_rack_loses_its_replicas_and_they_go_to_the_other_rack():
    fleet = build(NODES, [replica(1, "m", "a1", (0, 1, 2, 3)), replica(2, "m", "b1", (0, 1, 2, 3))])
    outcome = fail(fleet, "rack=r1")
    assert outcome.nodes == ["a1", "a2"]
    [lost] = outcome.lost
    assert lost.replica.id == 1 and lost.on == ("a1",)
    # b1 holds a replica already (spread), b2 holds none: b2.
    assert lost.decision is not None and lost.decision.nodes == ("b2",)
    assert outcome.below(fleet) == {}


def test_a_replica_that_fits_nowhere_says_why_and_leaves_the_model_short():
    # Eight GPUs a replica: the other rack's nodes are full with one each.
    reps = [replica(1, "m", "a1", tuple(range(8))), replica(2, "m", "b1", tuple(range(8)))]
    reps.append(replica(3, "m", "b2", tuple(range(8))))
    fleet = build(NODES, reps, gpus_per_shard=8)
    outcome = fail(fleet, "rack=r1")
    [lost] = outcome.lost
    assert lost.decision is None and lost.placement is not None
    rendered = lost.placement.explanation.render()
    # The failed nodes are NotReady; the others have no GPU free.
    assert "a1 is NotReady, needs Ready" in rendered
    assert "b1" in rendered and "free" in rendered
    assert outcome.below(fleet) == {"m": (2, 3)}


def test_a_pdu_spans_racks_and_a_node_is_a_domain_of_its_own():
    reps = [replica(1, "m", "a1", (0, 1, 2, 3)), replica(2, "m", "b1", (0, 1, 2, 3))]
    fleet = build(NODES, reps)
    assert resolve(fleet, "pdu=p1") == ["a1", "b1"]
    assert [lost.replica.id for lost in fail(fleet, "pdu=p1").lost] == [1, 2]
    assert [lost.replica.id for lost in fail(fleet, "b1").lost] == [2]
    assert fail(fleet, "a2").lost == []


@pytest.mark.parametrize(
    "domain, words",
    [
        ("rack=r9", "no node is labelled llmgw.io/rack=r9"),
        ("shelf=r1", "the level 'shelf' is not one of site, room, row, rack, pdu"),
        ("rack=", "name the rack after the '='"),
        ("zz9", "no such node"),
    ],
)
def test_an_unknown_domain_is_refused_by_name(domain, words):
    fleet = build(NODES, [])
    with pytest.raises(WhatIfError) as err:
        fail(fleet, domain)
    assert f"unknown domain {domain!r}" in str(err.value) and words in str(err.value)


def test_sweep_names_the_domains_that_would_hurt():
    # Two replicas of 8 GPUs on a1 and b1; a2 free; b2 has none free.
    reps = [replica(1, "m", "a1", tuple(range(8))), replica(2, "m", "b1", tuple(range(8)))]
    nodes = NODES
    fleet = build(nodes, reps, gpus_per_shard=8)
    # b2 is full of another model's shards.
    fleet.views[3] = gpu_node("b2", 8, allocated=tuple(range(8)), labels=labels("r2", "p2"))
    fleet.replicas.append(replica(3, "other", "b2", tuple(range(8))))
    tried, hurt = sweep(fleet)
    assert tried == 4  # rack=r1, rack=r2, pdu=p1, pdu=p2
    # Rack r1: a1's replica goes to... a2 is in r1 too, b2 is full: nowhere.
    # Rack r2: b1's goes to a2. PDU p1 takes a1 and b1: only a2 is left, for one.
    # PDU p2 takes a2 and b2: "other" loses its replica and has no held count.
    assert {o.domain: o.below(fleet) for o in hurt} == {
        "pdu=p1": {"m": (1, 2)},
        "rack=r1": {"m": (1, 2)},
    }
