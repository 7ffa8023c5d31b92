"""The snapshot the scheduler reads, rebuilt from what is stored, against
the scheduler's own incremental copy of the same fleet."""

from __future__ import annotations

from typing import Any

from llmgw.catalog import services as catalog
from llmgw.placement import snapshot
from llmgw.placement.scheduler import Inventory
from llmgw.placement.snapshot import node_views, profile_view
from llmgw.serving import placing
from llmgw.serving.models import Shard
from llmgw.units import GiB
from tests.payloads import heartbeat, registration

CATALOG = """
models:
  - name: pinned
    source: hf://x/pinned
    profiles:
      - name: cpu
        memory_gb: 1
        node_selector: {pool: x}
  - name: anywhere
    source: hf://x/anywhere
    profiles:
      - name: cpu
        memory_gb: 1
  - name: tenth
    source: hf://x/tenth
    profiles:
      - name: cpu
        memory_gb: 0.1
"""


def add(make_node: Any, agent_client: Any, name: str, labels: dict[str, str]) -> None:
    _, credential = make_node(name)
    system = {**registration(name)["system"], "memory_total_bytes": 64 * GiB, "cpus": 32}
    agent_client(credential).post("register", registration(name, system=system, labels=labels))
    agent_client(credential).post("heartbeat", heartbeat(name))


def test_a_shard_that_claims_nothing_uses_its_node_in_both(
    make_node: Any, agent_client: Any
) -> None:
    add(make_node, agent_client, "a", {})
    add(make_node, agent_client, "b", {"pool": "x"})
    catalog.apply_text(CATALOG)
    # Shards that declare no memory and no cores (a model stored before the
    # figures were required, or set so since): still a process on the node.
    for model in ("pinned", "anywhere"):
        catalog.set_resources(model, memory_gb=0, cpu_cores=0)
    inv = Inventory(node_views())
    replica, result = placing.place_replica("pinned")
    assert replica is not None and result.decision is not None
    assert result.decision.nodes == ("b",)
    inv.apply(result.decision)
    views = {v.name: v for v in node_views()}
    assert (views["a"].shards, views["b"].shards) == (0, 1)
    rebuilt = Inventory(views.values())
    assert inv.node("b").used and rebuilt.node("b").used
    # Both pack the next CPU shard onto the node already in use.
    replica, _ = placing.place_replica("anywhere")
    assert replica is not None
    assert Shard.objects.get(replica=replica).node.name == "b"


def test_a_node_counts_the_replicas_of_each_model_it_runs_in_both(
    make_node: Any, agent_client: Any
) -> None:
    add(make_node, agent_client, "a", {"llmgw.io/rack": "r1"})
    add(make_node, agent_client, "b", {"llmgw.io/rack": "r1"})
    catalog.apply_text(CATALOG)
    inv = Inventory(node_views())
    placed = []
    for model in ("anywhere", "anywhere", "tenth"):
        replica, result = placing.place_replica(model)
        assert replica is not None and result.decision is not None
        inv.apply(result.decision)
        placed.append(result.decision.nodes[0])
    # The second replica of a model goes where the first is not.
    assert placed[0] != placed[1]
    views = {v.name: v for v in node_views()}
    assert sum(v.models.get("anywhere", 0) for v in views.values()) == 2
    assert views[placed[2]].models == {"anywhere": 1, "tenth": 1}
    rebuilt = Inventory(views.values())
    for name in views:
        for model in ("anywhere", "tenth", "pinned"):
            assert inv.spread(name, model) == rebuilt.spread(name, model)


def test_fractional_claims_add_up_to_the_same_bytes(make_node: Any, agent_client: Any) -> None:
    add(make_node, agent_client, "a", {})
    catalog.apply_text(CATALOG)
    inv = Inventory(node_views())
    [profile] = [profile_view(p) for p in catalog_profiles("tenth")]
    for _ in range(3):
        replica, result = placing.place_replica("tenth")
        assert replica is not None and result.decision is not None
        inv.apply(result.decision)
    [view] = node_views()
    assert view.claimed_memory_bytes == 3 * profile.memory_bytes
    assert Inventory([view]).node("a").free_mem == inv.node("a").free_mem


def catalog_profiles(model: str) -> list[Any]:
    from llmgw.catalog.models import Profile

    return list(Profile.objects.filter(model__name=model))


def test_a_node_with_another_build_is_refused_a_pinned_version() -> None:
    """A node reports the build it installed: it has llama.cpp@b10991 and
    nothing else. Naming it also as a bare "llama.cpp" (an engine of unknown
    version, which an agent.yaml entry is) let a profile pinned to b11434
    through, onto a node whose engine would refuse the model's arguments."""
    from llmgw.placement.node_state import NodeState
    from llmgw.placement.rules import engine_refusal
    from llmgw.placement.snapshot import engine_view
    from llmgw.placement.types import NodeView, Profile

    installed, _ = engine_view(
        [{"name": "llama.cpp", "version": "b10991", "status": "installed", "message": ""}]
    )
    assert installed == frozenset({"llama.cpp@b10991"})
    configured, _ = engine_view([{"name": "vllm", "version": None, "status": "installed"}])
    assert configured == frozenset({"vllm"})
    view = NodeView(name="n", engines=installed, engines_probed=True)
    profile = Profile(name="cpu", engine="llama.cpp", engine_version="b11434")
    refusal = engine_refusal(NodeState(0, view), profile)
    assert refusal is not None and "needs llama.cpp@b11434" in refusal[1]


def test_engine_words_are_kept_per_engine():
    """Each engine's words under its own name: the first not installed
    stood for all of them, so a refusal for sglang quoted llama.cpp's pip."""
    from llmgw.placement.snapshot import engine_view

    _, status = engine_view(
        [
            {"name": "llama.cpp", "version": "b1", "status": "installing", "message": "pip …"},
            {"name": "sglang", "version": "0.4", "status": "failed", "message": "no GPU"},
        ]
    )
    assert status == {"llama.cpp": "installing: pip …", "sglang": "failed: no GPU"}


def test_nvlink_islands_from_the_reported_matrix():
    # nvidia-smi topo -m as the agent reports it: NV<n> joins two cards,
    # SYS/PIX or null does not; a card the node does not list is left out.
    uuids = {f"GPU-{g}": g for g in range(4)}
    cell = {(0, 1): "NV18", (2, 3): "NV12", (0, 2): "SYS", (1, 3): None}
    matrix = [
        ["X" if a == b else cell.get((min(a, b), max(a, b)), "PIX") for b in range(5)]
        for a in range(5)
    ]
    topology = {"gpus": [*uuids, "GPU-unknown"], "matrix": matrix}
    assert snapshot.nvlink_islands(topology, uuids) == (frozenset({0, 1}), frozenset({2, 3}))
    assert snapshot.nvlink_islands({"gpus": list(uuids), "matrix": []}, uuids) == ()
    assert snapshot.nvlink_islands(None, uuids) == ()
