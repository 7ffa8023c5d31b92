"""The warm fleet: each process keeps the fleet indexed and the database
says which nodes changed. Each change here is made the way production
makes it (a heartbeat through the agent API, a cordon and a label through
the services, a claim from another connection), committed, and then seen
by the very next placement."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from llmgw_agent.collectors.gpu import collect_gpus

from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.inventory import services as inventory
from llmgw.inventory.models import Gpu, Node
from llmgw.placement.snapshot import node_views
from llmgw.serving import desired, keep_warm, placing, warm
from llmgw.serving import services as serving
from llmgw.serving.models import GpuClaim, Replica, Shard
from tests.inventory.test_gpus import H100, join_with_gpus
from tests.payloads import heartbeat, registration
from tests.threads import checked_out_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)


def catalog_for(gpu_class: str) -> str:
    return f"""
models:
  - name: whole
    source: hf://x/whole
    profiles:
      - name: eight
        gpu_class: {gpu_class}
        gpus_per_shard: 8
  - name: one
    source: hf://x/one
    profiles:
      - name: single
        gpu_class: {gpu_class}
        gpus_per_shard: 1
  - name: pooled
    source: hf://x/pooled
    profiles:
      - name: cpu
        memory_gb: 1
        cpu_cores: 2
        node_selector:
          pool: blue
"""


def elsewhere(change: Callable[[], object]) -> None:
    """Run a change on a connection of its own, committed, as another
    process would."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with transaction.atomic():
                change()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert not errors, errors


@pytest.fixture
def dgx(make_node: Any, agent_client: Any) -> tuple[Any, Any]:
    """One H100 node, joined and Ready, and the catalog; the fleet is warm."""
    agent, roots, clock = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    assert agent.post("heartbeat", heartbeat("dgx-1", **collect_gpus(roots))).status_code == 200
    catalog.apply_text(catalog_for(Gpu.objects.filter(node__name="dgx-1").first().gpu_class))
    placing.dry_run("whole")
    assert warm.FLEET.inventory is not None
    return agent, roots


def shards_of(replica: Replica | None) -> list[int]:
    """The cards of a placed replica's one shard."""
    assert replica is not None
    return list(replica.shards.get().gpu_indices)


def words(model: str) -> str:
    text: str = placing.explain(model)["text"]
    return text


def test_a_heartbeat_that_breaks_a_card_is_seen_by_the_next_placement(dgx: Any) -> None:
    agent, roots = dgx
    assert placing.dry_run("whole").decision is not None
    sample = collect_gpus(roots)["gpus"]
    sample[3]["xids"] = {"79": 1}
    assert agent.post("heartbeat", heartbeat("dgx-1", gpus=sample)).status_code == 200
    replica, _ = placing.place_replica("whole")
    assert replica is None
    assert "XID 79" in words("whole")


def test_a_claim_committed_by_another_process_is_seen_by_the_next_placement(dgx: Any) -> None:
    node = Node.objects.get(name="dgx-1")
    placed, _ = placing.place_replica("one")
    assert placed is not None and list(placed.shards.get().gpu_indices) == [0]

    def claim_six() -> None:
        model = Model.objects.get(name="one")
        replica = Replica.objects.create(model=model, profile=model.profiles.get())
        shard = Shard.objects.create(replica=replica, node=node, gpu_indices=[1, 2, 3, 4, 5, 6])
        GpuClaim.objects.bulk_create(GpuClaim(shard=shard, node=node, index=i) for i in range(1, 7))

    elsewhere(claim_six)
    replica, _ = placing.place_replica("one")
    assert replica is not None and list(replica.shards.get().gpu_indices) == [7]
    assert placing.place_replica("one")[0] is None
    assert "has 0 free" in words("one")


def test_a_cordon_is_seen_by_the_next_placement(dgx: Any) -> None:
    assert placing.dry_run("one").decision is not None
    elsewhere(lambda: inventory.cordon("dgx-1", "RMA: GPU 3 fell off the bus", "ops"))
    assert placing.place_replica("one")[0] is None
    assert "dgx-1 is cordoned: RMA: GPU 3 fell off the bus" in words("one")
    elsewhere(lambda: inventory.uncordon("dgx-1", "ops"))
    assert placing.place_replica("one")[0] is not None


def test_a_change_committed_after_a_look_from_inside_its_transaction_is_seen(dgx: Any) -> None:
    # Placing by hand locks the model, then places (a look at the log),
    # then commits: what that transaction writes after its look is read
    # by the next one.
    with transaction.atomic():
        Model.objects.select_for_update(no_key=True).get(name="one")
        # A younger transaction commits first, as heartbeats do all along.
        elsewhere(lambda: Model.objects.filter(name="whole").update(weights="/w"))
        with warm.FLEET.lock:
            warm.FLEET.current()
        inventory.cordon("dgx-1", "power work", "ops")
    assert placing.place_replica("one")[0] is None


def test_a_label_is_seen_by_the_next_placement(dgx: Any) -> None:
    assert placing.place_replica("pooled")[0] is None
    assert "dgx-1 has no label pool, needs pool='blue'" in words("pooled")
    elsewhere(lambda: inventory.set_labels("dgx-1", {"pool": "blue"}, "ops"))
    replica, _ = placing.place_replica("pooled")
    assert replica is not None and replica.shards.get().node.name == "dgx-1"


def test_a_node_that_stops_heartbeating_is_not_ready_for_the_next_placement(dgx: Any) -> None:
    agent, roots = dgx
    Node.objects.filter(name="dgx-1").update(heartbeat_interval_s=1)
    assert placing.dry_run("one").decision is not None
    # Three missed one-second heartbeats: no row changes, the clock does.
    time.sleep(3.2)
    assert placing.place_replica("one")[0] is None
    assert "dgx-1 is NotReady" in words("one")
    assert agent.post("heartbeat", heartbeat("dgx-1", **collect_gpus(roots))).status_code == 200
    assert placing.place_replica("one")[0] is not None


def test_a_node_beating_past_its_first_deadline_is_not_read_again(dgx: Any) -> None:
    # Every node's deadline comes due once per grace period; a node that
    # beat since (its wear with it, which no view reads) is as it was.
    agent, roots = dgx
    Node.objects.filter(name="dgx-1").update(heartbeat_interval_s=1)
    assert placing.dry_run("one").decision is not None
    reads = warm.FLEET.reads
    for _ in range(4):
        time.sleep(1)
        sample = collect_gpus(roots)
        assert agent.post("heartbeat", heartbeat("dgx-1", **sample)).status_code == 200
        assert placing.dry_run("one").decision is not None
    assert Node.objects.get(name="dgx-1").wear_reported_at is not None
    assert warm.FLEET.reads == reads


def test_reading_the_fleet_leaves_out_what_no_view_reads(dgx: Any) -> None:
    with CaptureQueriesContext(connection) as seen:
        views = node_views()
    assert [v.name for v in views] == ["dgx-1"] and len(views[0].gpus) == 8
    sql = [q["sql"] for q in seen.captured_queries]
    # The desired state (tens of KB a GPU node) is never loaded, and no
    # column left out is fetched afterwards one node at a time.
    assert not [q for q in sql if '"desired"' in q]
    assert not [q for q in sql if 'WHERE "inventory_node"."id" = ' in q]


def test_a_cold_fleet_is_read_before_placing_by_hand_locks_anything(
    dgx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read under the model's row lock, 5,000 nodes kept every other placer
    # waiting until their statement timeouts failed them.
    warm.FLEET.reset()
    inside: list[bool] = []
    load = warm.FLEET._load_all

    def spy() -> None:
        inside.append(connection.in_atomic_block)
        load()

    monkeypatch.setattr(warm.FLEET, "_load_all", spy)
    replica, _, _ = serving.place_by_hand("one")
    assert replica is not None and inside == [False]


def waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        waiting = bool(cursor.fetchone()[0] > 0)
    connection.close()
    return waiting


@contextmanager
def placers_behind_a_locked_model(count: int) -> Iterator[list[tuple[Any, ...]]]:
    """`count` threads placing "one" by hand while another holds the model's
    row lock; yields once one of them waits on it and the others have had a
    moment to queue, and gathers each one's answer once the lock goes."""
    locked, release = threading.Event(), threading.Event()

    def hold_the_model() -> None:
        try:
            with transaction.atomic():
                Model.objects.select_for_update().get(name="one")
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    answers: list[tuple[Any, ...]] = []

    def place() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")  # as a request authenticates first
            answers.append(serving.place_by_hand("one"))
        finally:
            connection.close()

    connection.close()
    holder = threading.Thread(target=hold_the_model)
    holder.start()
    assert locked.wait(10)
    placers = [threading.Thread(target=place) for _ in range(count)]
    for thread in placers:
        thread.start()
    deadline = time.monotonic() + 10
    while not waiting_on_a_lock() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    try:
        yield answers
    finally:
        release.set()
        for thread in [holder, *placers]:
            thread.join(30)


def test_placers_queued_behind_a_locked_model_hold_one_connection_between_them(dgx: Any) -> None:
    # Eight placements through the API queued on the model's row lock held
    # all eight of a web process's connections, and its other requests
    # (and once its heartbeats) waited for one.
    with placers_behind_a_locked_model(6) as answers:
        assert checked_out_elsewhere() <= 2  # the lock's holder's and one placer's
    assert len(answers) == 6 and all(replica is not None for replica, _, _ in answers)


def test_own_placements_are_applied_in_memory_and_never_hand_out_a_card_twice(dgx: Any) -> None:
    placing.place_replica("one")
    built = warm.FLEET.rebuilds
    taken = [list(shards_of(placing.place_replica("one")[0])) for _ in range(7)]
    assert sorted(i for gpus in taken for i in gpus) == list(range(1, 8))
    assert warm.FLEET.rebuilds == built
    assert placing.place_replica("one")[0] is None
    assert GpuClaim.objects.filter(node__name="dgx-1").count() == 8


def test_a_placement_on_the_warm_fleet_is_eight_round_trips(
    dgx: Any, django_assert_num_queries: Any
) -> None:
    placing.place_replica("one")
    # BEGIN, the model with its profiles taking the lock, the look at the
    # log, one statement for replica, shard, claims and record, the node's
    # shards with the engines' versions, the node's desired state, the
    # check of the locked node against the look (serving.checked), COMMIT.
    with django_assert_num_queries(8):
        replica, _ = placing.place_replica("one")
    assert replica is not None
    node = Node.objects.get(name="dgx-1")
    assert list(
        GpuClaim.objects.filter(shard__replica=replica).values_list("index", flat=True)
    ) == [1]
    assert [s["id"] for s in node.desired["shards"]] == [f"r{replica.pk - 1}-0", f"r{replica.pk}-0"]
    assert node.desired["shards"][1]["gpus"] == [1]
    assert node.desired_digest == desired.digest(node.desired)
    # The next decision knows the card is taken without reading the node again.
    reads = warm.FLEET.reads
    assert list(shards_of(placing.place_replica("one")[0])) == [2]
    assert warm.FLEET.reads == reads


def test_a_new_node_joins_the_warm_fleet(dgx: Any, make_node: Any, agent_client: Any) -> None:
    placing.place_replica("pooled")
    _, credential = make_node("cpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("cpu-1", labels={"pool": "blue"}))
    agent.post("heartbeat", heartbeat("cpu-1"))
    replica, _ = placing.place_replica("pooled")
    assert replica is not None and replica.shards.get().node.name == "cpu-1"


def test_a_joining_node_is_read_alone_and_own_decisions_are_kept(
    dgx: Any, make_node: Any, agent_client: Any
) -> None:
    # A fleet joining at 5,000 nodes had every process read every node
    # again each time it looked. The new node alone is read; indexed again
    # from memory, the card our own placement claimed is still claimed.
    assert placing.place_replica("one")[0] is not None
    loads = warm.FLEET.loads
    for name in ("cpu-2", "cpu-0"):
        _, credential = make_node(name)
        agent = agent_client(credential)
        agent.post("register", registration(name))
        agent.post("heartbeat", heartbeat(name))
    assert placing.dry_run("whole").decision is None  # seven cards free, not eight
    assert warm.FLEET.loads == loads
    assert [warm.FLEET.views[pk].name for pk in warm.FLEET.order] == ["cpu-0", "cpu-2", "dgx-1"]


def test_a_fabric_seen_again_or_failing_a_sweep_is_not_a_change_of_the_fleet(dgx: Any) -> None:
    # Each node reporting its ports sets its fabric's last_seen, a sweep
    # that timed out writes its map's error, and each sweep stores the same
    # map with a new taken_at: logged as changes of every node, each had
    # every process read 5,000 nodes again. What placement reads still counts.
    from django.utils import timezone

    from llmgw.fabrics.models import FabricMap, PhysicalFabric

    def made() -> None:
        fabric = PhysicalFabric.objects.create(
            identity="0xa088c20300774110", kind="infiniband", last_seen=timezone.now()
        )
        FabricMap.objects.create(fabric=fabric)

    elsewhere(made)
    placing.dry_run("one")
    loads = warm.FLEET.loads
    fabrics = PhysicalFabric.objects.all()
    elsewhere(lambda: fabrics.update(last_seen=timezone.now()))
    elsewhere(
        lambda: FabricMap.objects.update(error="no answer within 120 s", error_at=timezone.now())
    )
    placing.dry_run("one")
    assert warm.FLEET.loads == loads
    elsewhere(lambda: FabricMap.objects.update(taken_at=timezone.now(), analysis={"nodes": {}}))
    placing.dry_run("one")
    assert warm.FLEET.loads == loads + 1
    # Swept again to the same map: only when it was taken moves.
    elsewhere(lambda: FabricMap.objects.update(taken_at=timezone.now(), analysis={"nodes": {}}))
    placing.dry_run("one")
    assert warm.FLEET.loads == loads + 1
    # Swept from another node: the map says where it was taken from. Each
    # sweep asks another node, and every process read the fleet whole for
    # it (4-10 s at 5,000 nodes while placements and heartbeats waited).
    for source in ("0xa088c20300740080", "0xa088c20300740382"):
        mapped = {"nodes": {}, "initiated_from": source}
        elsewhere(lambda m=mapped: FabricMap.objects.update(taken_at=timezone.now(), analysis=m))
        placing.dry_run("one")
        assert warm.FLEET.loads == loads + 1
    elsewhere(lambda: fabrics.update(identity="0xa088c20300774111"))
    placing.dry_run("one")
    assert warm.FLEET.loads == loads + 2


def test_placements_by_hand_waiting_together_are_placed_in_one_turn(dgx: Any) -> None:
    # Eight calls at once took eight turns of a transaction each; those
    # waiting when a turn starts now share it, each on the claims of those
    # placed before it in the turn.
    with placers_behind_a_locked_model(6) as answers:
        pass  # the first takes a turn and waits on the lock, five queue
    assert len(answers) == 6 and all(replica is not None for replica, _, _ in answers)
    assert serving._TURNS.sizes[:2] == [5, 1]
    assert sorted(counts["after"] for _, _, counts in answers) == [1, 2, 3, 4, 5, 6]
    claims = GpuClaim.objects.filter(node__name="dgx-1").values_list("index", flat=True)
    assert sorted(claims) == [0, 1, 2, 3, 4, 5]
    assert Model.objects.get(name="one").always_running == 6
    node = Node.objects.get(name="dgx-1")
    assert len(node.desired["shards"]) == 6


def test_a_turn_that_rolls_back_leaves_no_claim_in_the_warm_fleet(
    dgx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decisions are applied to the warm index as they are made; a turn that
    # fails after two of them must not leave two cards taken there.
    placing.place_replica("one")
    rebuild = desired.rebuild

    def fail(node_ids: object) -> None:
        raise RuntimeError("the nodes' desired state could not be written")

    monkeypatch.setattr(desired, "rebuild", fail)
    with pytest.raises(RuntimeError):
        placing.place_held(["one", "one"])
    monkeypatch.setattr(desired, "rebuild", rebuild)
    assert GpuClaim.objects.count() == 1
    placed = [placing.place_replica("one")[0] for _ in range(7)]
    assert all(r is not None for r in placed)
    assert GpuClaim.objects.count() == 8


def test_a_placement_whose_rows_are_refused_leaves_no_claim_in_the_warm_fleet(
    dgx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The decision's rows are refused (as the unique claim refuses a card
    # handed out twice): the card must not stay taken in the warm index.
    from llmgw.serving import storing

    store = storing.store

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the replica's rows could not be stored")

    monkeypatch.setattr(storing, "store", refused)
    with pytest.raises(RuntimeError):
        placing.place_held(["one"])
    monkeypatch.setattr(storing, "store", store)
    assert GpuClaim.objects.count() == 0
    placed = [placing.place_replica("one")[0] for _ in range(8)]
    assert all(r is not None for r in placed)


def test_a_turn_with_a_call_that_fails_places_the_others_alone(dgx: Any) -> None:
    from llmgw.placement.services import PlacementError
    from llmgw.serving.turns import _Call

    calls = [_Call("one", alone=False), _Call("gone", alone=False), _Call("one", alone=False)]
    serving._TURNS._run(calls)
    assert [c.outcome[0] is not None for c in (calls[0], calls[2])] == [True, True]
    assert isinstance(calls[1].error, PlacementError)
    assert "no model named 'gone'" in str(calls[1].error)
    assert Model.objects.get(name="one").always_running == 2


def test_kept_warm_a_change_of_the_whole_fleet_waits_for_a_quiet_interval(dgx: Any) -> None:
    # Warm, the keeper looks as a placement would; a change of the whole
    # fleet drops the index rather than reading it whole in the background,
    # and the fleet is read once a whole interval has passed without one
    # (a joining fleet maps its fabrics again and again).
    from django.utils import timezone

    from llmgw.fabrics.models import FabricMap, PhysicalFabric

    def made() -> None:
        fabric = PhysicalFabric.objects.create(
            identity="0xa088c20300774110", kind="infiniband", last_seen=timezone.now()
        )
        FabricMap.objects.create(fabric=fabric)

    def mapped() -> None:
        FabricMap.objects.update(taken_at=timezone.now(), analysis={"nodes": {}})

    loads = warm.FLEET.loads
    keep_warm.keep(warm.FLEET)
    assert warm.FLEET.inventory is not None and warm.FLEET.loads == loads
    elsewhere(made)
    keep_warm.keep(warm.FLEET)
    assert warm.FLEET.inventory is None and warm.FLEET.loads == loads
    elsewhere(mapped)
    keep_warm.keep(warm.FLEET)  # mapped again within the interval: still not read
    assert warm.FLEET.inventory is None and warm.FLEET.loads == loads
    keep_warm.keep(warm.FLEET)  # a quiet interval
    assert warm.FLEET.inventory is not None and warm.FLEET.loads == loads + 1
    # Node changes are read as they come, the fleet not read whole again.
    inventory.cordon("dgx-1", "swapping a card", "ops")
    keep_warm.keep(warm.FLEET)
    assert warm.FLEET.loads == loads + 1
    assert placing.dry_run("one").decision is None
    assert warm.FLEET.loads == loads + 1


def test_a_web_process_keeps_its_fleet_warm_from_its_start(
    dgx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cold, the first placement or explain after a deploy read 5,000 nodes
    # (5 to 8 s under load) with every other placer of the process behind it.
    import asyncio

    from llmgw import gc_pauses
    from llmgw.asgi import application
    from llmgw.serving import keep_warm

    monkeypatch.setattr(keep_warm, "FIRST_AFTER_S", 0.0)
    # The process's collector is settled and watched at startup; the test
    # runner's stays the runner's (settling: tests/test_gc_pauses.py).
    settled: list[str] = []
    monkeypatch.setattr(gc_pauses, "settle", lambda: settled.append("settle"))
    monkeypatch.setattr(gc_pauses, "watch", lambda: settled.append("watch"))
    monkeypatch.setattr(keep_warm, "KEEP_EVERY_S", 0.05)
    warm.FLEET.reset()
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        server = asyncio.ensure_future(application({"type": "lifespan"}, messages.get, send))
        await messages.put({"type": "lifespan.startup"})
        for _ in range(200):
            if warm.FLEET.inventory is not None:
                break
            await asyncio.sleep(0.05)
        await messages.put({"type": "lifespan.shutdown"})
        await server

    asyncio.run(run())
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert settled == ["settle", "watch"]
    assert warm.FLEET.inventory is not None and warm.FLEET.loads == 1
    assert placing.dry_run("one").decision is not None
    assert warm.FLEET.loads == 1
