"""A decision's claims added to node views and taken back (placement/claims.py):
one pair, so that what explain and what-if take out is exactly what the warm
fleet and the scheduler put in, watts included."""

from __future__ import annotations

from llmgw.placement.claims import apply_to_views, released, without
from llmgw.placement.types import Decision, Shard
from llmgw.units import GiB
from tests.placement.helpers import gpu_node


def shard(node: str, gpus: tuple[int, ...], watts: float | None) -> Shard:
    return Shard(
        node=node,
        gpu_indices=gpus,
        gpu_uuids=tuple(f"GPU-{node}-{i}" for i in gpus),
        adapters=(),
        cpu_cores=8,
        memory_bytes=64 * GiB,
        holds_weights=False,
        power_w=watts,
    )


def test_a_decision_taken_back_leaves_the_views_as_they_were_watts_included():
    # A node in a capped domain: 2.1 kW declared, 1.8 kW measured.
    views = [gpu_node("a", declared_w=2100.0, measured_w=1800.0), gpu_node("b")]
    d = Decision("m", "p", (shard("a", (0, 1), 1400.0), shard("b", (3,), None)))
    placed = apply_to_views(views, d)
    assert placed[0].declared_w == 3500.0 and placed[0].measured_w == 3200.0
    assert placed[1].declared_w is None  # nothing declared, nothing added: still unknown
    # Explain judges a decision's nodes with its own claims taken out: the
    # undo it used forgot the watts, so the domain drew the replica twice.
    assert without(placed, d) == views
    assert released(placed, [d]) == views


def test_unknown_draws_stay_unknown_and_never_go_below_nothing():
    views = [gpu_node("a", declared_w=None, measured_w=None)]
    d = Decision("m", "p", (shard("a", (0,), 700.0),))
    placed = apply_to_views(views, d)
    # Declared starts from nothing; what was never measured stays unknown.
    assert placed[0].declared_w == 700.0 and placed[0].measured_w is None
    assert without(placed, d)[0].declared_w == 0.0
    low = [gpu_node("a", declared_w=100.0, measured_w=50.0, models={"m": 1})]
    assert without(low, d)[0].declared_w == 0.0 and without(low, d)[0].measured_w == 0.0
