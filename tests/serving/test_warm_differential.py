"""The warm fleet against a fresh read, step by step, with faults.

One process places through its warm index (this test's own connection,
serving.placing); another changes the fleet on a connection of its own
(`elsewhere`): cordons, labels, holds, cards going bad and coming back,
claims it makes itself, releases. Between them: callers whose
transactions roll back, changes committed between a look and the decision
made after it, and a read that fails at each read point in turn. After
every step the warm index equals a fresh read of the database, no stored
claim breaks a rule, and no placement lands on a node that a committed
change had made ineligible.

The harness can fail: with the check under lock (serving.checked) or the
rule that the shared index changes only after commit switched off, the
same steps break it (the two tests at the end).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, transaction

from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.facility import services as facility
from llmgw.facility.models import Hold
from llmgw.inventory import services as inventory
from llmgw.inventory.models import Gpu
from llmgw.placement.scheduler import Inventory
from llmgw.placement.services import PlacementError
from llmgw.placement.snapshot import node_views
from llmgw.placement.types import READY
from llmgw.serving import checked, placing, warm
from llmgw.serving.models import GpuClaim, Replica, Shard
from tests import bulk_fleet
from tests.serving.test_warm_fleet import elsewhere

pytestmark = pytest.mark.django_db(transaction=True)

CATALOG = """
models:
  - name: one
    source: hf://x/one
    profiles:
      - name: single
        gpu_class: H100-80GB
        gpus_per_shard: 1
        memory_gb: 700
        cpu_cores: 60
  - name: pair
    source: hf://x/pair
    profiles:
      - name: two
        gpu_class: H100-80GB
        gpus_per_shard: 2
        node_selector:
          pool: blue
"""
MODELS = ("one", "pair")


class Undone(Exception):
    pass


def fleet() -> list[str]:
    # Nodes 8-11 of the bulk fleet: four Ready H100 machines in one rack,
    # two PDUs (192 cores and 2 TiB each: three of "one" fill a node's cores).
    names = bulk_fleet.build(4, start=8)
    catalog.apply_text(CATALOG)
    return names


# -- what the other process does --------------------------------------------


def claim_free_card(rng: random.Random) -> None:
    """Another process places by itself: a free, healthy card of a node."""
    taken = set(GpuClaim.objects.values_list("node_id", "index"))
    free = [
        (g.node_id, g.index)
        for g in Gpu.objects.filter(unhealthy_reason="").order_by("node_id", "index")
        if (g.node_id, g.index) not in taken
    ]
    if not free:
        return
    node_id, index = rng.choice(free)
    model = Model.objects.get(name="pair")
    replica = Replica.objects.create(model=model, profile=model.profiles.get())
    shard = Shard.objects.create(replica=replica, node_id=node_id, gpu_indices=[index])
    GpuClaim.objects.create(shard=shard, node_id=node_id, index=index)


def change(rng: random.Random, names: list[str]) -> Callable[[], object]:
    """One committed change of the fleet, as another process makes it."""
    name = rng.choice(names)
    kind = rng.choice(["cordon", "uncordon", "label", "card", "heal", "claim", "release", "hold"])
    if kind == "cordon":
        return lambda: inventory.cordon(name, "RMA", "ops")
    if kind == "uncordon":
        return lambda: inventory.uncordon(name, "ops")
    if kind == "label":
        pool = rng.choice(["blue", "red", None])
        return lambda: inventory.set_labels(name, {"pool": pool}, "ops")
    if kind == "card":
        index = rng.randrange(8)
        return lambda: Gpu.objects.filter(node__name=name, index=index).update(
            unhealthy_reason="XID 79: fell off the bus"
        )
    if kind == "heal":
        return lambda: Gpu.objects.filter(node__name=name).update(unhealthy_reason="")
    if kind == "claim":
        return lambda: claim_free_card(rng)
    if kind == "release":
        pk = rng.choice([None, *Replica.objects.values_list("pk", flat=True)])
        return lambda: None if pk is None else placing.release_replica(pk)
    pdu = f"pdu={rng.choice(['r000-pdu0', 'r000-pdu1'])}"
    if Hold.objects.filter(domain=pdu).exists():
        return lambda: facility.release(pdu)
    return lambda: facility.hold(pdu, "breaker work", False, "ops")


# -- what this process does ---------------------------------------------------


def place(model: str) -> Replica | None:
    try:
        return placing.place_replica(model)[0]
    except PlacementError:
        return None


def place_racing(model: str, other: Callable[[], object]) -> Replica | None:
    """A placement whose look misses a change committed right after it."""
    real = warm.WarmFleet._changes
    done: list[bool] = []

    def look(self: warm.WarmFleet, *args: Any) -> Any:
        out = real(self, *args)
        if not done:
            done.append(True)
            elsewhere(other)
        return out

    # setattr: the method is replaced for this placement alone.
    setattr(warm.WarmFleet, "_changes", look)  # noqa: B010
    try:
        return place(model)
    finally:
        setattr(warm.WarmFleet, "_changes", real)  # noqa: B010


READ_POINTS = ("_changes", "_read", "_load_all", "_follow", "_moved_deadlines")


def place_failing(model: str, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A placement during which one read fails, as a statement timeout would."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("canceling statement due to statement timeout")

    with monkeypatch.context() as m:
        m.setattr(warm.WarmFleet, point, fail)
        try:
            place(model)
        except OperationalError:
            pass


def rolled_back(model: str, twice: bool) -> None:
    """A caller's transaction that places (once, or twice: the second sees
    the first) and then rolls back."""
    try:
        with transaction.atomic():
            place(model)
            if twice:
                place(rng_model(model))
            raise Undone
    except Undone:
        pass


def rng_model(model: str) -> str:
    return MODELS[(MODELS.index(model) + 1) % len(MODELS)]


# -- what must hold -------------------------------------------------------------


def state(inv: Inventory, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        n = inv.node(name)
        # (A class whose last free card a decision took keeps an empty list.)
        free = {cls: cards for cls, cards in n.free.items() if cards}
        out[name] = (free, n.free_mem, n.free_cores, n.view.cordoned, n.view.state, n.view.held)
    return out


def holds(names: list[str], placed: list[Replica]) -> None:
    with warm.FLEET.lock:
        warm_index = warm.FLEET.current()
        assert state(warm_index, names) == state(Inventory(node_views()), names)
    fresh = {v.name: v for v in node_views()}
    for v in fresh.values():
        assert v.memory_total_bytes is None or v.claimed_memory_bytes <= v.memory_total_bytes
        assert v.cpus is None or v.claimed_cores <= v.cpus
    for replica in placed:
        for shard in replica.shards.select_related("node"):
            v = fresh[shard.node.name]
            assert not v.cordoned, f"placed on {v.name}, cordoned before the placement committed"
            assert v.state == READY
            assert not v.held, f"placed on {v.name}, held before the placement committed"
            bad = {g.index for g in v.gpus if not g.healthy}
            assert not bad & set(shard.gpu_indices), f"placed on a bad card of {v.name}"
            if replica.model.name == "pair":
                assert v.labels.get("pool") == "blue"


def run(seed: int, steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    names = fleet()
    place("one")  # warm
    # A fixed opening that reaches every kind of step, then random ones.
    script = ["race-cordon", "rollback-once", *(f"fail-{p}" for p in READ_POINTS), "race-claim"]
    script += [
        rng.choice(["change", "change", "place", "place", "race", "rollback", "fail"])
        for _ in range(steps)
    ]
    for step in script:
        model = rng.choice(MODELS)
        placed: list[Replica] = []
        if step == "change":
            elsewhere(change(rng, names))
        elif step == "place":
            placed = [r for r in [place(model)] if r is not None]
        elif step == "race-cordon":
            # Every node cordoned after the look: nothing may place.
            placed = [r for r in [place_racing("one", cordon_all(names))] if r]
            holds(names, placed)
            for name in names:
                inventory.uncordon(name, "ops")
        elif step == "race-claim":
            placed = [r for r in [place_racing("one", lambda: claim_free_card(rng))] if r]
        elif step == "race":
            placed = [r for r in [place_racing(model, change(rng, names))] if r]
        elif step == "rollback-once":
            rolled_back("one", twice=False)
        elif step == "rollback":
            rolled_back(model, twice=rng.random() < 0.5)
        else:
            point = step.removeprefix("fail-") if "-" in step else rng.choice(READ_POINTS)
            place_failing(model, point, monkeypatch)
        holds(names, placed)


def cordon_all(names: list[str]) -> Callable[[], None]:
    def run() -> None:
        for name in names:
            inventory.cordon(name, "rack power loss", "ops")

    return run


def test_the_warm_index_is_the_database_after_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    run(seed=29, steps=40, monkeypatch=monkeypatch)


def test_with_the_check_under_lock_off_a_placement_lands_on_a_cordoned_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checked, "check", lambda *args, **kwargs: None)
    with pytest.raises(AssertionError, match="cordoned before the placement committed"):
        run(seed=29, steps=0, monkeypatch=monkeypatch)


def test_with_the_index_changed_before_commit_a_rollback_leaves_claims_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(warm.WarmFleet, "restore", lambda *args, **kwargs: None)
    with pytest.raises(AssertionError):
        run(seed=29, steps=0, monkeypatch=monkeypatch)
