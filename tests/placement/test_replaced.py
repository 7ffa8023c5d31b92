"""Inventory.replaced re-indexes a few nodes of a copy instead of the whole
fleet (what-if fails hundreds of racks in turn). On random clusters: after
replacing some nodes' views (nodes gone NotReady, replicas released), the
copy decides, and refuses each node for the same reason, as an Inventory built afresh from the
new views, decision after decision; and the inventory it was copied from
is left as it was."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw.placement.claims import apply_to_views
from llmgw.placement.scheduler import Inventory
from llmgw.placement.types import Decision, NodeView, Placement, Profile
from llmgw.placement.whatif import released
from tests.placement.test_properties import MODEL, clusters


def reasons(result: Placement) -> list[tuple[str, str, str]]:
    return [(r.profile, r.node, r.reason_code) for r in result.explanation.rejections]


def run(inv: Inventory, views: list[NodeView], ps: list[Profile], rounds: int) -> None:
    """Place `rounds` replicas on the inventory and on fresh ones, comparing."""
    for _ in range(rounds):
        result = inv.place(MODEL, ps)
        fresh = Inventory(views).place(MODEL, ps)
        assert result.decision == fresh.decision
        # The same node refused for the same reason; the words may differ,
        # as a dry run names the claims it placed itself apart.
        assert reasons(result) == reasons(fresh)
        if result.decision is None:
            break
        inv.apply(result.decision)
        views = apply_to_views(views, result.decision)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_a_replaced_copy_decides_as_a_fresh_inventory(cluster, data):
    views, ps = cluster
    inv = Inventory(views)
    placed: list[Decision] = []
    for _ in range(data.draw(st.integers(0, 3))):
        d = inv.place(MODEL, ps).decision
        if d is None:
            break
        inv.apply(d)
        placed.append(d)
        views = apply_to_views(views, d)
    before = list(views)
    names = [v.name for v in views]
    failed = set(data.draw(st.lists(st.sampled_from(names), unique=True, max_size=3)))
    picked = data.draw(st.lists(st.integers(0, len(placed) - 1), unique=True)) if placed else []
    freed = [placed[i] for i in picked]
    after = [
        replace(v, state="NotReady") if v.name in failed else v for v in released(views, freed)
    ]
    changed = [new for old, new in zip(views, after, strict=True) if new != old]
    copy = inv.replaced(changed)
    run(copy, after, ps, 3)
    # The inventory it came from still decides on the views before.
    run(inv, before, ps, 2)
