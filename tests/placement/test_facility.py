"""Facility rules, one table each: holds, spread over rooms/rows/racks/PDUs,
keep_within, and power caps counting the largest known draw."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmgw.placement.scheduler import Inventory, headroom, place
from llmgw.placement.types import NodeView, Profile, Reason

from .helpers import cpu_node, cpu_profile, gpu_node, gpu_profile


def at(**where: str) -> dict[str, str]:
    return {f"llmgw.io/{level}": value for level, value in where.items()}


def reasons(nodes: list[NodeView], profile: Profile) -> dict[str, tuple[Reason, str]]:
    result = place("m", [profile], nodes)
    return {r.node: (r.reason_code, r.message) for r in result.explanation.rejections}


def placed_in_turn(nodes: list[NodeView], k: int, profile: Profile) -> list[str]:
    inv = Inventory(nodes)
    out = []
    for _ in range(k):
        result = inv.place("m", [profile])
        assert result.decision is not None, result.explanation.render()
        inv.apply(result.decision)
        out.append(",".join(result.decision.nodes))
    return out


# -- holds ------------------------------------------------------------------


def test_nothing_is_placed_on_a_node_in_a_held_domain() -> None:
    nodes = [
        gpu_node("a", labels=at(rack="r01"), held="rack r01 (PDU work, draining)"),
        gpu_node("b", labels=at(rack="r02")),
    ]
    result = place("m", [gpu_profile()], nodes)
    assert result.decision is not None and result.decision.nodes == ("b",)
    assert reasons(nodes, gpu_profile())["a"] == (
        Reason.HELD,
        "a is in held rack r01 (PDU work, draining), needs a domain that is not held",
    )


def test_a_held_fleet_refuses_with_the_hold_named() -> None:
    nodes = [gpu_node("a", held="row row1 (cooling)")]
    result = place("m", [gpu_profile()], nodes)
    assert result.decision is None
    assert "held row row1 (cooling)" in result.explanation.render()


# -- spread -----------------------------------------------------------------

SPREAD = [
    pytest.param(
        lambda: [
            gpu_node("a", labels=at(rack="r1", pdu="p1")),
            gpu_node("b", labels=at(rack="r1", pdu="p1")),
            gpu_node("c", labels=at(rack="r1", pdu="p2")),
        ],
        2,
        ["a", "c"],
        id="two-pdus-in-one-rack",
    ),
    pytest.param(
        lambda: [
            gpu_node("a", labels=at(row="w1", rack="r1")),
            gpu_node("b", labels=at(row="w1", rack="r2")),
            gpu_node("c", labels=at(row="w2", rack="r3")),
        ],
        2,
        ["a", "c"],
        id="rows-before-racks",
    ),
    pytest.param(
        lambda: [
            gpu_node("a", labels=at(room="m1", rack="r1", pdu="p1")),
            gpu_node("b", labels=at(room="m1", rack="r2", pdu="p2")),
            gpu_node("c", labels=at(room="m2", rack="r3", pdu="p3")),
            gpu_node("d", labels=at(room="m2", rack="r4", pdu="p4")),
        ],
        4,
        ["a", "c", "b", "d"],
        id="rooms-then-racks",
    ),
    pytest.param(
        lambda: [gpu_node(f"n{i}", labels=at(rack=f"r{i}")) for i in range(3)],
        3,
        ["n0", "n1", "n2"],
        id="three-replicas-three-racks",
    ),
    pytest.param(
        # More replicas than racks: spread is a preference, never a refusal.
        lambda: [gpu_node("a", labels=at(rack="r1")), gpu_node("b", labels=at(rack="r1"))],
        5,
        ["a", "b", "a", "b", "a"],
        id="more-replicas-than-racks",
    ),
]


@pytest.mark.parametrize(("nodes", "k", "chosen"), SPREAD)
def test_replicas_spread_over_facility_domains(
    nodes: Callable[[], list[NodeView]], k: int, chosen: list[str]
) -> None:
    assert placed_in_turn(nodes(), k, gpu_profile()) == chosen


def test_the_refusal_names_the_crowded_domain() -> None:
    nodes = [
        gpu_node("a", labels=at(rack="r1", pdu="p1")),
        gpu_node("b", labels=at(rack="r1", pdu="p1")),
        gpu_node("c", labels=at(rack="r1", pdu="p2")),
    ]
    inv = Inventory(nodes)
    first = inv.place("m", [gpu_profile()])
    assert first.decision is not None
    inv.apply(first.decision)
    second = inv.place("m", [gpu_profile()])
    why = {r.node: r.message for r in second.explanation.rejections}
    assert why["b"] == (
        "b fits, but its pdu p1 holds 1 replica of this model already and c's pdu p2 holds none"
    )


def test_cpu_replicas_spread_over_pdus_too() -> None:
    nodes = [
        cpu_node("a", labels=at(pdu="p1")),
        cpu_node("b", labels=at(pdu="p1")),
        cpu_node("c", labels=at(pdu="p2")),
    ]
    assert placed_in_turn(nodes, 2, cpu_profile(memory_gb=1)) == ["a", "c"]


# -- keep_within ------------------------------------------------------------

FAB = {"ib-a": ("mlx5_0",)}


def test_keep_within_keeps_a_multi_node_replica_in_one_rack() -> None:
    nodes = [
        gpu_node("a", 16, fabrics=FAB, labels=at(rack="r1")),
        gpu_node("b", 16, fabrics=FAB, labels=at(rack="r2")),
        gpu_node("c", fabrics=FAB, labels=at(rack="r2")),
    ]
    loose = place("m", [gpu_profile(gpus=4, nodes_per_replica=2)], nodes).decision
    assert loose is not None and set(loose.nodes) == {"a", "b"}
    kept = place("m", [gpu_profile(gpus=4, nodes_per_replica=2, keep_within="rack")], nodes)
    assert kept.decision is not None and set(kept.decision.nodes) == {"b", "c"}
    assert {r.node: r.reason_code for r in kept.explanation.rejections} == {"a": Reason.KEEP_WITHIN}


def test_keep_within_refuses_naming_the_domains_tried() -> None:
    nodes = [
        gpu_node("a", fabrics=FAB, labels=at(row="w1", rack="r1")),
        gpu_node("b", fabrics=FAB, labels=at(row="w2", rack="r2")),
        gpu_node("c", fabrics=FAB),
    ]
    p = gpu_profile(gpus=4, nodes_per_replica=2, keep_within="row")
    result = place("m", [p], nodes)
    assert result.decision is None
    why = {r.node: (r.reason_code, r.message) for r in result.explanation.rejections}
    assert why["a"] == (
        Reason.KEEP_WITHIN,
        "a fits, but its row w1 has 1 node that fit on one fabric, needs 2 "
        "(keep_within row; tried row w1: 1, row w2: 1)",
    )
    assert why["c"] == (
        Reason.KEEP_WITHIN,
        "c names no row, needs one: the profile keeps a replica within one",
    )


def test_keep_within_is_one_of_rack_row_room() -> None:
    with pytest.raises(ValueError, match="keep_within"):
        Profile(name="p", keep_within="pdu")


# -- power caps -------------------------------------------------------------


def powered(name: str, rack: str, cap: float, **kw: float | None) -> NodeView:
    return gpu_node(name, labels=at(rack=rack), budgets=((f"rack={rack}", cap),), **kw)


CAPS = [
    pytest.param(
        # Derived (the cards' limits) is the largest known: it bites.
        lambda: [powered("a", "r07", 40_000, measured_w=38_200, derived_w=41_000)],
        gpu_profile(power_w=5_600),
        "a is in rack r07, which is at 41.0 kW of its 40.0 kW cap (38.2 kW measured, "
        "41.0 kW derived, declared unknown); this shard adds 5.6 kW declared",
        id="derived-over-the-cap",
    ),
    pytest.param(
        # Measured plus the shard passes the cap; derived alone would not.
        lambda: [powered("a", "r07", 40_000, measured_w=36_000, derived_w=20_000)],
        gpu_profile(power_w=5_000),
        "a is in rack r07, which is at 36.0 kW of its 40.0 kW cap (36.0 kW measured, "
        "20.0 kW derived, declared unknown); this shard adds 5.0 kW declared",
        id="measured-plus-the-shard",
    ),
    pytest.param(
        # Nothing declared: the shard adds its cards' enforced limits.
        lambda: [
            gpu_node(
                "a",
                labels=at(pdu="p1"),
                budgets=(("pdu=p1", 1_000),),
                declared_w=900,
                gpu_power_limit=700,
            )
        ],
        gpu_profile(),
        "a is in pdu p1, which is at 0.9 kW of its 1.0 kW cap (measured unknown, "
        "derived unknown, 0.9 kW declared); this shard adds 0.7 kW derived from its GPUs' limits",
        id="derived-from-the-cards-taken",
    ),
    pytest.param(
        # Unknown is said to be unknown: the domain is over its cap already.
        lambda: [
            cpu_node("a", labels=at(rack="r1"), budgets=(("rack=r1", 500),), declared_w=600),
            cpu_node("b", labels=at(rack="r1"), budgets=(("rack=r1", 500),)),
        ],
        cpu_profile(),
        "a is in rack r1, which is at 0.6 kW of its 0.5 kW cap (measured unknown, "
        "derived unknown, 0.6 kW declared, 1 node of unknown draw); this shard adds an unknown draw",
        id="unknown-draw",
    ),
]


@pytest.mark.parametrize(("nodes", "profile", "message"), CAPS)
def test_a_shard_that_would_pass_a_cap_is_refused_with_the_numbers(
    nodes: Callable[[], list[NodeView]], profile: Profile, message: str
) -> None:
    result = place("m", [profile], nodes())
    assert result.decision is None
    first = result.explanation.rejections[0]
    assert (first.reason_code, first.message) == (Reason.POWER_CAP, message)


def test_a_cap_with_room_places_and_a_dry_run_counts_what_it_placed() -> None:
    nodes = [
        powered("a", "r1", 10_000, measured_w=1_000),
        powered("b", "r1", 10_000, measured_w=1_000),
        powered("c", "r2", 3_000, measured_w=1_000),
    ]
    p = gpu_profile(gpus=8, power_w=3_000)
    # r1: 2 kW measured, then 5 kW, 8 kW; r2: 1 kW, then 4 kW > 3 kW.
    assert headroom("m", [p], nodes) == {"gpu": 2}
    assert placed_in_turn(nodes, 2, p) == ["a", "b"]


def test_a_multi_node_replica_counts_all_its_shards_against_a_cap() -> None:
    cap = (("rack=r1", 10_000),)
    nodes = [
        gpu_node(n, fabrics=FAB, labels=at(rack="r1"), budgets=cap, measured_w=1_000)
        for n in ("a", "b")
    ]
    # Each shard alone fits (2 + 4 = 6 kW), the two together do not (10 kW + 2).
    p = gpu_profile(gpus=4, nodes_per_replica=2, power_w=4_000, keep_within=None)
    assert place("m", [p], nodes).decision is not None
    big = gpu_profile(gpus=4, nodes_per_replica=2, power_w=5_000)
    result = place("m", [big], nodes)
    assert result.decision is None
    assert {r.reason_code for r in result.explanation.rejections} == {Reason.POWER_CAP}
    assert (
        "rack r1, which is at 2.0 kW of its 10.0 kW cap" in result.explanation.rejections[0].message
    )
    assert result.explanation.rejections[0].message.endswith("this shard adds 10.0 kW declared")
