"""The warm fleet never makes a placement wrong: the database has the last
word. A read that fails drops the index, a caller's transaction that rolls
back leaves nothing behind in it, and a decision made on a stale index is
checked against the rows it depends on, locked, before its claims are
written."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError, connection, transaction

from llmgw.inventory import services as inventory
from llmgw.inventory.models import Node
from llmgw.serving import placing, warm
from llmgw.serving.models import GpuClaim, Shard
from tests.serving.test_warm_fleet import dgx, elsewhere  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failed_read_of_the_changed_nodes_loses_no_change(
    dgx: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Warm after one placement; another process cordons the node; the next
    # look's read of the changed node fails (a statement timeout).
    assert placing.place_replica("one")[0] is not None
    elsewhere(lambda: inventory.cordon("dgx-1", "RMA: GPU 3 fell off the bus", "ops"))
    read = warm.WarmFleet._read

    def timed_out(pks: set[int]) -> dict[int, Any]:
        raise OperationalError("canceling statement due to statement timeout")

    monkeypatch.setattr(warm.WarmFleet, "_read", staticmethod(timed_out))
    with pytest.raises(OperationalError):
        placing.place_replica("one")
    monkeypatch.setattr(warm.WarmFleet, "_read", read)
    # The cordon is not lost with the read: the next placement refuses.
    assert placing.place_replica("one")[0] is None
    assert Shard.objects.count() == 1


def test_a_caller_that_rolls_back_leaves_no_claim_in_the_warm_fleet(dgx: Any) -> None:  # noqa: F811
    # The draining path places inside its caller's transaction; eight such
    # transactions rolled back must leave the node's eight cards free.
    class Undone(Exception):
        pass

    for _ in range(8):
        with pytest.raises(Undone), transaction.atomic():
            assert placing.place_replica("one")[0] is not None
            raise Undone
    assert GpuClaim.objects.count() == 0
    placed = [placing.place_replica("one")[0] for _ in range(8)]
    assert all(r is not None for r in placed)
    assert GpuClaim.objects.count() == 8


def test_a_savepoint_rolled_back_inside_a_caller_leaves_no_claim(dgx: Any) -> None:  # noqa: F811
    with transaction.atomic():
        assert placing.place_replica("one")[0] is not None
        try:
            with transaction.atomic():
                assert placing.place_replica("one")[0] is not None
                raise RuntimeError("the caller gives this one up")
        except RuntimeError:
            pass
        # The first still holds in this transaction: the next takes a third card.
        third = placing.place_replica("one")[0]
        assert third is not None and list(third.shards.get().gpu_indices) == [1]
    assert sorted(GpuClaim.objects.values_list("index", flat=True)) == [0, 1]
    placed = [placing.place_replica("one")[0] for _ in range(6)]
    assert all(r is not None for r in placed)
    assert placing.place_replica("one")[0] is None


def test_a_decision_on_a_stale_index_is_checked_under_lock_and_made_again(
    dgx: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The index is warm; another process takes cards 0-6 and cordons nothing.
    # A look that missed it (as a look that raced the commit would) must not
    # hand out a taken card: the check under lock reads the node again.
    assert placing.dry_run("one").decision is not None
    node = Node.objects.get(name="dgx-1")

    def claim_seven() -> None:
        from llmgw.catalog.models import Model
        from llmgw.serving.models import Replica

        model = Model.objects.get(name="one")
        replica = Replica.objects.create(model=model, profile=model.profiles.get())
        shard = Shard.objects.create(replica=replica, node=node, gpu_indices=list(range(7)))
        GpuClaim.objects.bulk_create(GpuClaim(shard=shard, node=node, index=i) for i in range(7))

    # The look that follows sees no change: as if the commit landed between
    # the look and the decision.
    real = warm.WarmFleet._changes
    calls = {"n": 0}

    def blind(self: warm.WarmFleet, *args: Any) -> Any:
        out = real(self, *args)
        calls["n"] += 1
        if calls["n"] == 1:
            elsewhere(claim_seven)
        return out

    monkeypatch.setattr(warm.WarmFleet, "_changes", blind)
    replica, _ = placing.place_replica("one")
    assert replica is not None
    assert list(replica.shards.get().gpu_indices) == [7]
    assert GpuClaim.objects.count() == 8
    assert connection.in_atomic_block is False
