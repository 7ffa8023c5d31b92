"""Spreading over rooms, rows, racks and PDUs, node by node: on random
fleets whose levels cut across each other (a row over several racks, a PDU
over two), each model's next replica goes where a full scan of the views
says, decision after decision, for several models at once. The index files
nodes by domain group and re-sorts groups as counts change (spread.py);
this is the plain reading of the rule it must keep."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw.locations import label as level_label
from llmgw.placement import spread
from llmgw.placement.claims import apply_to_views
from llmgw.placement.node_state import NodeState
from llmgw.placement.rules import pick_gpus
from llmgw.placement.scheduler import Inventory
from llmgw.placement.spread import Groups
from llmgw.placement.types import SPREAD_LEVELS, GpuView, NodeView, Profile
from llmgw.placement.verdicts import shard_refusal
from llmgw.units import GiB

MODELS = ["m0", "m1", "m2"]
VALUES = {
    "room": [None, "a", "b"],
    "row": [None, "w1", "w2"],
    "rack": [None, "r1", "r2", "r3"],
    "pdu": [None, "p1", "p2"],
}


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[NodeView], dict[str, Profile]]:
    views = []
    # Often the whole fleet in one hall: a domain every node names, which
    # the index leaves out of its scores; or the hall but for a few nodes
    # labelled with nothing, which it scores inverted (spread.Groups).
    hall = draw(st.sampled_from(["no", "all", "most"]))
    for i in range(draw(st.integers(2, 12))):
        labels = {}
        bare = hall == "most" and draw(st.integers(0, 3)) == 0
        for level in SPREAD_LEVELS:
            if bare:
                break
            value = (
                "hall" if hall != "no" and level == "room" else draw(st.sampled_from(VALUES[level]))
            )
            if value is not None:
                labels[level_label(level)] = value
        gpus = tuple(
            GpuView(g, f"GPU-{i}-{g}", "H100", 80 * GiB, allocated=draw(st.integers(0, 3)) == 0)
            for g in range(8)
        )
        views.append(
            NodeView(
                name=f"n{i}",
                labels=labels,
                cpus=64,
                memory_total_bytes=512 * GiB,
                gpus=gpus,
                nvlink_islands=(frozenset(range(4)), frozenset(range(4, 8))),
                models={m: draw(st.integers(1, 2)) for m in draw(st.sets(st.sampled_from(MODELS)))},
                holds_weights=frozenset(draw(st.sets(st.sampled_from(MODELS), max_size=1))),
            )
        )
    profiles = {
        m: Profile("main", 0, "H100", gps, draw(st.sampled_from([1, gps])), memory_gb=8)
        for m, gps in zip(
            MODELS, draw(st.lists(st.sampled_from([1, 2, 4]), min_size=3, max_size=3)), strict=True
        )
    }
    return views, profiles


def reference(views: list[NodeView], model: str, p: Profile) -> tuple[str, tuple[int, ...]] | None:
    """Fewest of the model's replicas on the node, then in its room, row,
    rack and PDU (a level the node names no value for counts the node
    alone), its weights there, then the fewest free GPUs, then node order."""
    counts: dict[tuple[str, str], int] = {}
    for v in views:
        for level in SPREAD_LEVELS:
            value = v.labels.get(level_label(level))
            if value is not None:
                key = (level, value)
                counts[key] = counts.get(key, 0) + v.models.get(model, 0)
    fits = []
    for ordinal, v in enumerate(views):
        n = NodeState(ordinal, v)
        if shard_refusal(n, p) is not None:
            continue
        mine = v.models.get(model, 0)
        around = tuple(
            mine if value is None else counts[(level, value)]
            for level in SPREAD_LEVELS
            for value in [v.labels.get(level_label(level))]
        )
        key = (mine, around, model not in v.holds_weights, n.free_count(p.gpu_class), ordinal)
        fits.append((key, v.name, pick_gpus(n, p)))
    if not fits:
        return None
    _, name, gpus = min(fits)
    assert gpus is not None
    return name, gpus


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.lists(st.sampled_from(MODELS), min_size=1, max_size=12))
def test_each_replica_goes_where_a_full_scan_of_the_levels_says(fleet, turns):
    places_as_the_scan_says(fleet, turns)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.lists(st.sampled_from(MODELS), min_size=1, max_size=12))
def test_re_sorting_the_whole_order_at_once_places_as_the_scan_says(fleet, turns):
    # What a placement does when it moves many groups (spread.BULK): here
    # on every placement, in fleets small enough to check by hand.
    bulk = spread.BULK
    spread.BULK = 0
    try:
        places_as_the_scan_says(fleet, turns)
    finally:
        spread.BULK = bulk


def places_as_the_scan_says(
    fleet: tuple[list[NodeView], dict[str, Profile]], turns: list[str]
) -> None:
    views, profiles = fleet
    inv = Inventory(views)
    for model in turns:
        p = profiles[model]
        d = inv.decide(model, p)
        expected = reference(views, model, p)
        if d is None:
            assert expected is None
            continue
        assert (d.shards[0].node, d.shards[0].gpu_indices) == expected
        inv.apply(d)
        views = apply_to_views(views, d)


def hall_of_racks(unlabelled: int) -> list[NodeView]:
    """40 nodes of 8 GPUs in one hall, four a rack and two a PDU; the first
    `unlabelled` of them name nothing at all."""
    return [
        NodeView(
            name=f"n{i}",
            labels={
                level_label("room"): "hall1",
                level_label("rack"): f"r{i // 4}",
                level_label("pdu"): f"r{i // 4}-p{i % 2}",
            }
            if i >= unlabelled
            else {},
            cpus=64,
            memory_total_bytes=512 * GiB,
            gpus=tuple(GpuView(g, f"GPU-{i}-{g}", "H100", 80 * GiB) for g in range(8)),
        )
        for i in range(40)
    ]


def placed_on(views: list[NodeView], count: int) -> list[int]:
    """The nodes (by ordinal) that `count` one-GPU replicas go to, in turn."""
    inv = Inventory(views)
    p = Profile("main", 0, "H100", 1, 1, memory_gb=8)
    out = []
    for _ in range(count):
        d = inv.decide("m", p)
        assert d is not None
        out.append(int(d.shards[0].node[1:]))
        inv.apply(d)
    return out


def test_a_replica_placed_in_a_hall_of_racks_re_sorts_only_its_racks_groups():
    # Every group shares the hall: counting it moved every group's score
    # on every placement, 2,500 of them at 5,000 nodes, and ordered nothing.
    views = hall_of_racks(unlabelled=0)
    groups = Groups([NodeState(o, v) for o, v in enumerate(views)])
    assert len(groups.members) == 20
    # Its rack's two PDUs: nothing in the rest of the hall moves.
    assert [len(related) for related in groups.related] == [2] * 20
    racks = [views[o].labels[level_label("rack")] for o in placed_on(views, 10)]
    assert len(set(racks)) == 10  # one replica a rack still


def test_a_few_unlabelled_nodes_beside_a_hall_re_sort_only_themselves_and_the_rack():
    # 64 nodes naming nothing beside 5,000 in one hall made the hall a
    # domain not every group names: every placement there re-scored every
    # group. Scored inverted, the hall moves only the unlabelled group.
    views = hall_of_racks(unlabelled=4)
    groups = Groups([NodeState(o, v) for o, v in enumerate(views)])
    assert len(groups.members) == 19
    bare = groups.of[0]
    assert groups.related[bare] == []
    # A rack's two PDUs and the unlabelled group, not the other 16 groups.
    assert {len(related) for g, related in enumerate(groups.related) if g != bare} == {3}
    places = [
        "bare" if o < 4 else views[o].labels[level_label("rack")] for o in placed_on(views, 12)
    ]
    # The unlabelled nodes count each as its own room, so they come first
    # (one replica each), then one replica a rack.
    assert places[:4] == ["bare"] * 4
    assert len(set(places[4:])) == 8
