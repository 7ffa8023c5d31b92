"""Invariants over random clusters: the cases nobody thought to write down.

Each example places several replicas in a row on one random cluster,
applying every decision (both to the scheduler's indexed copy and to the
views), and checks every placement against the views as they stood.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw.placement.claims import apply_to_views
from llmgw.placement.node_state import NodeState
from llmgw.placement.rules import pick_gpus
from llmgw.placement.scheduler import Inventory, place
from llmgw.placement.types import RACK, READY, GpuView, NodeView, Placement, Profile, Reason
from llmgw.placement.verdicts import shard_refusal
from llmgw.units import GiB

CLASSES = ["H100", "A100"]
FABRICS = ["ib-a", "ib-b"]
MODEL = "m"
RACKS = [None, "r1", "r2"]


def rack_labels(rack: str | None) -> dict[str, str]:
    return {} if rack is None else {RACK: rack}


@st.composite
def node_views(draw: st.DrawFn, name: str) -> NodeView:
    n = draw(st.integers(0, 8))
    cls = draw(st.sampled_from(CLASSES))
    mixed = draw(st.booleans())
    gpus = tuple(
        GpuView(
            index=i,
            uuid=f"GPU-{name}-{i}",
            gpu_class=CLASSES[i % 2] if mixed else cls,
            healthy=draw(st.booleans()) or draw(st.booleans()),
            unhealthy_reason="ECC",
            allocated=draw(st.integers(0, 3)) == 0,
        )
        for i in range(n)
    )
    islands: tuple[frozenset[int], ...] = ()
    if n and draw(st.booleans()):
        cut = draw(st.integers(1, n))
        islands = (frozenset(range(cut)), frozenset(range(cut, n)) or frozenset({0}))
        if not islands[1] or cut == n:
            islands = (frozenset(range(n)),)
    fabrics = {
        f: tuple(f"{f}-mlx5_{j}" for j in range(draw(st.integers(0, 2))))
        for f in draw(st.lists(st.sampled_from(FABRICS), unique=True, max_size=2))
    }
    memory = draw(st.one_of(st.none(), st.integers(0, 64).map(lambda g: g * GiB)))
    cpus = draw(st.one_of(st.none(), st.integers(0, 32)))
    # Shards already there (some of which may claim nothing at all), of the
    # model placed and of another.
    models = draw(
        st.sampled_from([{}, {}, {MODEL: 1}, {MODEL: 2}, {"other": 1}, {"other": 2, MODEL: 1}])
    )
    return NodeView(
        name=name,
        state=draw(st.sampled_from([READY, READY, READY, "NotReady"])),
        cordoned=draw(st.integers(0, 5)) == 0,
        cordon_reason="maintenance",
        labels={
            **draw(st.sampled_from([{}, {"pool": "a"}, {"pool": "b"}])),
            **rack_labels(draw(st.sampled_from(RACKS))),
        },
        cpus=cpus,
        memory_total_bytes=memory,
        claimed_memory_bytes=draw(st.integers(0, 32)) * GiB if memory else 0,
        claimed_cores=draw(st.integers(0, 16)) if cpus else 0,
        models=models,
        gpus=gpus,
        fabrics=fabrics,
        nvlink_islands=islands,
        holds_weights=draw(st.sampled_from([frozenset(), frozenset({MODEL})])),
        engines=draw(
            st.sampled_from([frozenset(), frozenset({"llama.cpp"}), frozenset({"vllm@1"})])
        ),
        engines_probed=draw(st.booleans()),
        engine_status={"llama.cpp": "installing: downloading"},
        nvlink_domain=draw(st.sampled_from([None, None, "d1", "d2"])),
        fabric_leaves={f: draw(st.sampled_from(["l1", "l2"])) for f in fabrics},
        degraded_fabrics=frozenset(draw(st.lists(st.sampled_from(FABRICS), max_size=1))),
    )


@st.composite
def profiles(draw: st.DrawFn, name: str) -> Profile:
    gpu = draw(st.booleans())
    gps = draw(st.integers(1, 8)) if gpu else 0
    return Profile(
        name=name,
        priority=draw(st.integers(0, 3)),
        gpu_class=draw(st.sampled_from(CLASSES)) if gpu else None,
        gpus_per_shard=gps,
        tensor_parallel=draw(st.sampled_from([1, 2, 4, 8])),
        nodes_per_replica=draw(st.sampled_from([1, 1, 2, 3])),
        min_memory_gb=draw(st.sampled_from([0, 8, 24])),
        memory_gb=draw(st.sampled_from([0, 4, 15])),
        cpu_cores=draw(st.sampled_from([0, 2, 8])),
        engine=draw(st.sampled_from(["llama.cpp", "vllm"])),
        engine_version=draw(st.sampled_from([None, "1"])),
        node_selector=draw(st.sampled_from([{}, {"pool": "a"}])),
        fabric=draw(st.sampled_from([None, None, "ib-a"])),
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeView], list[Profile]]:
    count = draw(st.integers(1, 10))
    nodes = [draw(node_views(f"n{i}")) for i in range(count)]
    ps = [draw(profiles(f"p{i}")) for i in range(draw(st.integers(1, 3)))]
    return nodes, ps


def check(result: Placement, nodes: list[NodeView], ps: list[Profile]) -> None:
    by_name = {v.name: v for v in nodes}
    by_profile = {p.name: p for p in ps}
    attempts = result.explanation.attempts
    assert [a[1] for a in attempts] == sorted((a[1] for a in attempts), reverse=True)
    assert all(not placed for _, _, placed in attempts[:-1])
    rejected: dict[str, set[str]] = {}
    for r in result.explanation.rejections:
        assert r.message.startswith(r.node) and r.node in by_name
        if r.reason_code not in (Reason.NOT_READY, Reason.CORDONED):
            # A refusal says what the node lacks ("needs"), what the chosen
            # one had over it ("but"), or that only node order set two
            # equal nodes apart.
            assert any(w in r.message for w in ("needs", "but", "comes first in node order"))
        rejected.setdefault(r.profile, set()).add(r.node)
    d = result.decision
    if d is None:
        assert len(attempts) == len(ps)
        for name, _, _ in attempts:
            assert rejected.get(name, set()) == set(by_name), "every node has a reason"
        return
    p = by_profile[d.profile]
    assert attempts[-1][0] == p.name and attempts[-1][2]
    chosen = set(d.nodes)
    assert len(chosen) == len(d.shards) == p.nodes_per_replica
    assert rejected.get(p.name, set()) == set(by_name) - chosen, "every unchosen node has a reason"
    if p.nodes_per_replica > 1:
        assert d.fabric is not None
        if d.fabric.startswith("nvlink:"):
            assert {by_name[n].nvlink_domain for n in d.nodes} == {d.fabric.removeprefix("nvlink:")}
            assert all(s.adapters == () for s in d.shards)
        else:
            assert p.fabric in (None, d.fabric)
            for s in d.shards:
                assert s.adapters and s.adapters == tuple(by_name[s.node].fabrics[d.fabric])
    else:
        assert d.fabric is None and d.shards[0].adapters == ()
    for s in d.shards:
        v = by_name[s.node]
        assert v.state == READY and not v.cordoned
        assert all(v.labels.get(k) == want for k, want in p.node_selector.items())
        if v.engines_probed:
            assert any(e.split("@")[0] == p.engine for e in v.engines)
        gpus = {g.index: g for g in v.gpus}
        assert len(set(s.gpu_indices)) == len(s.gpu_indices) == p.gpus_per_shard
        for i in s.gpu_indices:
            g = gpus[i]
            assert g.gpu_class == p.gpu_class and g.healthy and not g.allocated
        group = min(p.tensor_parallel, p.gpus_per_shard)
        if v.nvlink_islands and group == p.gpus_per_shard > 1:
            assert any(set(s.gpu_indices) <= island for island in v.nvlink_islands)
        if v.memory_total_bytes is not None:
            if p.min_memory_gb:
                assert v.memory_total_bytes >= p.min_memory_bytes
            if s.memory_bytes:
                assert v.claimed_memory_bytes + s.memory_bytes <= v.memory_total_bytes
        if v.cpus is not None and s.cpu_cores:
            assert v.claimed_cores + s.cpu_cores <= v.cpus


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_placement_keeps_the_hard_constraints(
    cluster: tuple[list[NodeView], list[Profile]],
) -> None:
    nodes, ps = cluster
    inv = Inventory(nodes)
    for _ in range(4):
        result = inv.place(MODEL, ps)
        # The indexed copy, updated in place, decides as a fresh look would.
        fresh = place(MODEL, ps, nodes)
        assert result.decision == fresh.decision
        check(result, nodes, ps)
        if result.decision is None:
            break
        inv.apply(result.decision)
        nodes = apply_to_views(nodes, result.decision)


@st.composite
def multi_node_clusters(draw: st.DrawFn) -> tuple[list[NodeView], list[Profile]]:
    # The general strategy refuses most multi-node replicas outright; here
    # most nodes are usable, so the fabric, domain and leaf choices get exercised.
    nodes, ps = draw(clusters())
    nodes += [draw(node_views(f"x{i}")) for i in range(draw(st.integers(2, 8)))]
    nodes = [
        replace(v, state=READY, cordoned=False, engines_probed=False, labels={})
        if draw(st.integers(0, 4))
        else v
        for v in nodes
    ]
    ps = [replace(p, nodes_per_replica=draw(st.integers(2, 3)), node_selector={}) for p in ps]
    return nodes, ps


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(multi_node_clusters())
def test_multi_node_replicas_keep_the_hard_constraints(
    cluster: tuple[list[NodeView], list[Profile]],
) -> None:
    test_every_placement_keeps_the_hard_constraints.hypothesis.inner_test(cluster)  # type: ignore[attr-defined]


def reference_pick(nodes: list[NodeView], p: Profile) -> tuple[str, tuple[int, ...]] | None:
    """The preference order as the module docstring states it, node by node."""
    in_rack: Counter[str] = Counter()
    for v in nodes:
        if RACK in v.labels:
            in_rack[v.labels[RACK]] += v.models.get(MODEL, 0)
    fits = []
    for ordinal, v in enumerate(nodes):
        n = NodeState(ordinal, v)
        if shard_refusal(n, p) is None:
            mine = v.models.get(MODEL, 0)
            # A node that names no rack is a rack of its own.
            spread = (mine, in_rack[v.labels[RACK]] if RACK in v.labels else mine)
            holder = MODEL not in v.holds_weights
            if p.gpu_class is None:
                key: tuple[int, ...] = (*spread, holder, n.has_gpus, not n.used, ordinal)
            else:
                key = (*spread, holder, n.free_count(p.gpu_class), ordinal)
            fits.append((key, v.name, pick_gpus(n, p)))
    if not fits:
        return None
    _, name, gpus = min(fits)
    assert gpus is not None
    return name, gpus


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_index_picks_what_a_full_scan_would(
    cluster: tuple[list[NodeView], list[Profile]],
) -> None:
    nodes, ps = cluster
    inv = Inventory(nodes)
    for _ in range(4):
        p = ps[0] if ps[0].nodes_per_replica == 1 else replace(ps[0], nodes_per_replica=1)
        d = inv.decide(MODEL, p)
        expected = reference_pick(nodes, p)
        assert (d.shards[0].node, d.shards[0].gpu_indices) == expected if d else expected is None
        if d is None:
            break
        inv.apply(d)
        nodes = apply_to_views(nodes, d)


def free_state(inv: Inventory, name: str, models: list[str]) -> tuple[object, ...]:
    n = inv.node(name)
    # A class whose last free card went keeps an empty list; a fresh look has no entry.
    free = {cls: indices for cls, indices in n.free.items() if indices}
    return free, n.free_mem, n.free_cores, n.used, [inv.spread(name, m) for m in models]


@st.composite
def several_models(draw: st.DrawFn) -> tuple[list[NodeView], dict[str, list[Profile]], list[str]]:
    models = [f"m{j}" for j in range(draw(st.integers(2, 4)))]
    nodes = [
        replace(
            v,
            holds_weights=frozenset(draw(st.lists(st.sampled_from(models), max_size=2))),
            models={
                **v.models,
                **{
                    m: draw(st.integers(1, 2))
                    for m in draw(st.lists(st.sampled_from(models), max_size=2))
                },
            },
        )
        for v in (draw(node_views(f"n{i}")) for i in range(draw(st.integers(1, 8))))
    ]
    catalog: dict[str, list[Profile]] = {}
    for m in models:
        ps = [draw(profiles(f"{m}-p{i}")) for i in range(draw(st.integers(1, 2)))]
        # Claims of nothing are what a hand-written CPU profile often declares.
        catalog[m] = [
            replace(p, memory_gb=0, cpu_cores=0) if draw(st.booleans()) else p for p in ps
        ]
    steps = draw(st.lists(st.sampled_from(models), min_size=1, max_size=12))
    return nodes, catalog, steps


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(several_models())
def test_the_incremental_inventory_matches_one_rebuilt_after_every_step(
    case: tuple[list[NodeView], dict[str, list[Profile]], list[str]],
) -> None:
    nodes, catalog, steps = case
    inv = Inventory(nodes)
    for model in steps:
        result = inv.place(model, catalog[model])
        fresh = Inventory(nodes).place(model, catalog[model])
        assert result.decision == fresh.decision
        if result.decision is None:
            continue
        inv.apply(result.decision)
        nodes = apply_to_views(nodes, result.decision)
        rebuilt = Inventory(nodes)
        for v in nodes:
            assert free_state(inv, v.name, list(catalog)) == free_state(
                rebuilt, v.name, list(catalog)
            ), v.name


@st.composite
def identical_fitting_nodes(draw: st.DrawFn) -> tuple[list[NodeView], Profile, int]:
    """n nodes alike but for their racks, each with room for one replica or
    more, and k <= n replicas to place."""
    p = replace(draw(profiles("p")), nodes_per_replica=1, node_selector={}, min_memory_gb=0)
    room = draw(st.integers(1, 3))
    cards = p.gpus_per_shard * room + draw(st.integers(0, 2))
    memory = draw(st.one_of(st.none(), st.just(p.memory_bytes * room + GiB)))
    cpus = draw(st.one_of(st.none(), st.just(p.cpu_cores * room + 1)))
    used = draw(st.integers(0, 2))
    weights = draw(st.sampled_from([frozenset(), frozenset({MODEL})]))
    count = draw(st.integers(1, 8))
    nodes = [
        NodeView(
            name=f"n{i}",
            labels=rack_labels(draw(st.sampled_from(RACKS))),
            cpus=cpus,
            memory_total_bytes=memory,
            models={"other": used},
            gpus=tuple(
                GpuView(index=g, uuid=f"GPU-n{i}-{g}", gpu_class=p.gpu_class or "H100")
                for g in range(cards)
            ),
            holds_weights=weights,
        )
        for i in range(count)
    ]
    return nodes, p, draw(st.integers(1, count))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(identical_fitting_nodes())
def test_k_replicas_on_k_or_more_alike_nodes_never_share_one(
    case: tuple[list[NodeView], Profile, int],
) -> None:
    nodes, p, k = case
    # On a copy: what it counts must not leak into the inventory it came from.
    original = Inventory(nodes)
    inv = original.copy()
    chosen = []
    for _ in range(k):
        d = inv.decide(MODEL, p)
        assert d is not None
        assert d == Inventory(nodes).decide(MODEL, p)
        chosen.append(d.nodes[0])
        inv.apply(d)
        nodes = apply_to_views(nodes, d)
    assert len(set(chosen)) == k, chosen
    assert all(original.spread(v.name, MODEL) == (0, 0) for v in nodes)
