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
from llmgw.placement.checks import NodeState, pick_gpus, shard_refusal
from llmgw.placement.scheduler import Inventory, apply_to_views
from llmgw.placement.types import SPREAD_LEVELS, GpuView, NodeView, Profile
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
    for i in range(draw(st.integers(2, 12))):
        labels = {}
        for level in SPREAD_LEVELS:
            value = draw(st.sampled_from(VALUES[level]))
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
