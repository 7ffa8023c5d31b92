"""Facility invariants over random fleets: no replica in a held domain, no
capped domain past its cap by the largest known draw, keep_within holds,
and spread never refuses a replica that fits."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llmgw.placement.claims import apply_to_views
from llmgw.placement.scheduler import Inventory, place
from llmgw.placement.types import GpuView, NodeView, Profile

MODEL = "m"
WHERE = {
    "room": [None, "m1", "m2"],
    "row": [None, "w1", "w2"],
    "rack": [None, "r1", "r2", "r3"],
    "pdu": [None, "p1", "p2"],
}
WATTS = st.one_of(st.none(), st.integers(0, 8).map(lambda k: k * 500.0))


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[NodeView], list[Profile]]:
    caps = draw(
        st.dictionaries(
            st.sampled_from(["rack=r1", "rack=r2", "pdu=p1", "row=w1", "room=m2", "n0"]),
            st.integers(1, 12).map(lambda k: k * 1000.0),
            max_size=3,
        )
    )
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        name = f"n{i}"
        where = {level: draw(st.sampled_from(values)) for level, values in WHERE.items()}
        labels = {f"llmgw.io/{k}": v for k, v in where.items() if v is not None}
        keys = [f"{k}={v}" for k, v in where.items() if v is not None] + [name]
        count = draw(st.integers(0, 8))
        limit = draw(st.one_of(st.none(), st.sampled_from([300.0, 700.0])))
        gpus = tuple(
            GpuView(
                index=g,
                uuid=f"GPU-{name}-{g}",
                gpu_class="H100",
                allocated=draw(st.integers(0, 3)) == 0,
                power_limit_w=limit,
            )
            for g in range(count)
        )
        nodes.append(
            NodeView(
                name=name,
                cpus=64,
                memory_total_bytes=2**40,
                labels=labels,
                gpus=gpus,
                fabrics={"ib-a": ("mlx5_0",)},
                models=draw(st.sampled_from([{}, {}, {MODEL: 1}])),
                held=draw(st.sampled_from(["", "", "", "rack r1 (work)"])),
                declared_w=draw(WATTS),
                derived_w=draw(WATTS),
                measured_w=draw(WATTS),
                budgets=tuple((k, caps[k]) for k in keys if k in caps),
            )
        )
    profiles = []
    for j in range(draw(st.integers(1, 2))):
        gpu = draw(st.booleans())
        profiles.append(
            Profile(
                name=f"p{j}",
                priority=j,
                gpu_class="H100" if gpu else None,
                gpus_per_shard=draw(st.integers(1, 4)) if gpu else 0,
                nodes_per_replica=draw(st.sampled_from([1, 1, 2])) if gpu else 1,
                power_w=draw(WATTS),
                keep_within=draw(st.sampled_from([None, None, "rack", "row"])),
            )
        )
    return nodes, profiles


def largest(v: NodeView) -> float | None:
    known = [w for w in (v.declared_w, v.derived_w, v.measured_w) if w is not None]
    return max(known) if known else None


def domain_draw(nodes: list[NodeView], key: str) -> float:
    return sum(largest(v) or 0.0 for v in nodes if key in dict(v.budgets))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_facility_rules_hold_for_every_placement(
    fleet: tuple[list[NodeView], list[Profile]],
) -> None:
    nodes, ps = fleet
    by_profile = {p.name: p for p in ps}
    inv = Inventory(nodes)
    for _ in range(4):
        result = inv.place(MODEL, ps)
        assert result.decision == place(MODEL, ps, nodes).decision
        d = result.decision
        if d is None:
            break
        by_name = {v.name: v for v in nodes}
        p = by_profile[d.profile]
        # No replica in a held domain.
        assert all(not by_name[n].held for n in d.nodes)
        # keep_within: every node of the replica names the same domain.
        if p.keep_within is not None and p.nodes_per_replica > 1:
            label = f"llmgw.io/{p.keep_within}"
            values = {by_name[n].labels.get(label) for n in d.nodes}
            assert len(values) == 1 and None not in values
        inv.apply(d)
        nodes = apply_to_views(nodes, d)
        # No capped domain of the replica's nodes past its cap.
        for n in d.nodes:
            for key, cap in by_name[n].budgets:
                assert domain_draw(nodes, key) <= cap, (key, cap)


def unlabelled(v: NodeView) -> NodeView:
    return replace(v, labels={})


def row_capped(name: str, gpus: int, models: dict[str, int] | None = None) -> NodeView:
    """A node of row w1, capped at 2 kW, its draw unknown."""
    return NodeView(
        name=name,
        cpus=64,
        memory_total_bytes=2**40,
        labels={"llmgw.io/row": "w1"},
        gpus=tuple(GpuView(index=g, uuid=f"GPU-{name}-{g}", gpu_class="H100") for g in range(gpus)),
        fabrics={"ib-a": ("mlx5_0",)},
        models=models or {},
        budgets=(("row=w1", 2000.0),),
    )


# Found by this test: two 1.5 kW shards over ib-a. Labelled, spread puts
# n5 (outside row w1, which runs a replica already) first and the pair
# n5, n2 fits the cap; unlabelled, the nodes tie, preference took n2 and
# n4, both in row w1 (3 kW past its 2 kW), and the cap refused that set
# whole, never trying n5 beside n2.
CAPPED_PAIR = (
    [
        row_capped("n2", 1),
        row_capped("n3", 0, {MODEL: 1}),
        row_capped("n4", 1),
        replace(row_capped("n5", 1), labels={}, budgets=()),
    ],
    [Profile(name="p0", gpu_class="H100", gpus_per_shard=1, nodes_per_replica=2, power_w=1500.0)],
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
@example(CAPPED_PAIR)
def test_spread_never_refuses_a_replica_that_fits(
    fleet: tuple[list[NodeView], list[Profile]],
) -> None:
    nodes, ps = fleet
    # keep_within is a hard rule on the labels; spread alone is tested here.
    ps = [replace(p, keep_within=None) for p in ps]
    inv = Inventory(nodes)
    for _ in range(4):
        d = inv.place(MODEL, ps).decision
        # The same fleet as it stands, without a room, row, rack or PDU named.
        flat = place(MODEL, ps, [unlabelled(v) for v in nodes]).decision
        assert (d is None) == (flat is None)
        if d is None:
            break
        inv.apply(d)
        nodes = apply_to_views(nodes, d)


def counted(inv: Inventory) -> list[tuple[object, ...]]:
    return sorted(
        (d.key, d.cap, d.declared, d.derived, d.measured, d.draw, d.unknown)
        for d in inv.power_domains()
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.data())
def test_replaced_nodes_are_counted_in_their_capped_domains_as_afresh(
    fleet: tuple[list[NodeView], list[Profile]], data: st.DataObject
) -> None:
    # A few nodes' figures change (readings, a replica released) beside
    # many that do not: each replaced node is counted out of its domains
    # and in again, not the domains again from every node; the sums, and
    # what is placed on them, are a fresh inventory's.
    nodes, ps = fleet
    # (In no capped domain: each domain keeps the few nodes drawn.)
    nodes = nodes + [replace(v, name=f"{v.name}-{i}", budgets=()) for i in range(8) for v in nodes]
    inv = Inventory(nodes)
    for _ in range(data.draw(st.integers(0, 3))):
        d = inv.place(MODEL, ps).decision
        if d is None:
            break
        inv.apply(d)
        nodes = apply_to_views(nodes, d)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(nodes) - 1))
        new = replace(
            nodes[i],
            declared_w=data.draw(WATTS),
            derived_w=data.draw(WATTS),
            measured_w=data.draw(WATTS),
        )
        nodes = [*nodes[:i], new, *nodes[i + 1 :]]
        inv = inv.replaced([new])
        assert counted(inv) == counted(Inventory(nodes))
    for _ in range(3):
        result = inv.place(MODEL, ps)
        assert result.decision == place(MODEL, ps, nodes).decision
        if result.decision is None:
            break
        inv.apply(result.decision)
        nodes = apply_to_views(nodes, result.decision)
        assert counted(inv) == counted(Inventory(nodes))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.data())
def test_nodes_rewatted_decide_and_count_as_afresh(
    fleet: tuple[list[NodeView], list[Profile]], data: st.DataObject
) -> None:
    # The warm fleet's power timer: readings (measured draw, the cards'
    # limits and their sum) move on some nodes and nothing else does; the
    # nodes are not filed again, and the copy decides, refuses and counts
    # its capped domains as a fresh inventory of the new views.
    nodes, ps = fleet
    inv = Inventory(nodes)
    for _ in range(data.draw(st.integers(0, 2))):
        d = inv.place(MODEL, ps).decision
        if d is None:
            break
        inv.apply(d)
        nodes = apply_to_views(nodes, d)
    moved = data.draw(st.lists(st.integers(0, len(nodes) - 1), unique=True, max_size=4))
    limit = data.draw(st.one_of(st.none(), st.sampled_from([300.0, 700.0])))
    for i in moved:
        v = nodes[i]
        nodes[i] = replace(
            v,
            gpus=tuple(replace(g, power_limit_w=limit) for g in v.gpus),
            derived_w=data.draw(WATTS),
            measured_w=data.draw(WATTS),
        )
    inv.rewatt([nodes[i] for i in moved])
    assert counted(inv) == counted(Inventory(nodes))
    for _ in range(3):
        result = inv.place(MODEL, ps)
        fresh = Inventory(nodes).place(MODEL, ps)
        assert result.decision == fresh.decision
        # The same node refused for the same reason (a dry run names its
        # own claims apart in the words).
        assert [(r.node, r.reason_code) for r in result.explanation.rejections] == [
            (r.node, r.reason_code) for r in fresh.explanation.rejections
        ]
        if result.decision is None:
            break
        inv.apply(result.decision)
        nodes = apply_to_views(nodes, result.decision)
