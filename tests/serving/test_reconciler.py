"""Held models on the control plane: desired shards go out with heartbeat
answers, shard reports come back, the reconciler keeps the counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.cli import ctl
from llmgw.serving import placing, reconciler, tasks
from llmgw.serving.models import Replica, Shard
from tests.payloads import heartbeat, registration
from tests.tokens import make_token

CATALOG = """
engines:
  llama.cpp:
    version: b11434
    default: true
    builds:
      ubuntu-x64: {url: "http://127.0.0.1:9/llama-b11434-bin-ubuntu-x64.tar.gz", sha256: "%s"}
models:
  - name: tiny
    source: hf://x/tiny
    always_running: 2
    under_load: 3
    profiles:
      - name: cpu
        memory_gb: 2
        cpu_cores: 1
        args: ["--ctx-size", "512"]
""" % ("ab" * 32)


@pytest.fixture
def node(make_node, agent_client):
    _, credential = make_node("cpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("cpu-1"))
    agent.post("heartbeat", heartbeat("cpu-1"))
    catalog.apply_text(CATALOG)
    return agent


def report(agent, states: dict[str, str], **extra) -> dict:
    shards = [
        {
            "id": sid,
            "state": st,
            "url": f"http://127.0.0.1:{18000 + i}",
            "pid": 100 + i,
            "restarts": 0,
            "generation": 1,
            "message": extra.get("message", ""),
            "cpu_cores": 0.9,
            "memory_bytes": extra.get("memory_bytes", 3 * 10**9),
        }
        for i, (sid, st) in enumerate(sorted(states.items()))
    ]
    response = agent.post("heartbeat", heartbeat("cpu-1", shards=shards))
    assert response.status_code == 200, response.content
    return response.json()


def test_always_running_replicas_go_out_as_desired_shards(node):
    reconciler.reconcile_all()
    assert Replica.objects.filter(model__name="tiny").count() == 2
    desired = report(node, {})["desired"]
    assert [e["version"] for e in desired["engines"]] == ["b11434"]
    assert [s["model"] for s in desired["shards"]] == ["tiny", "tiny"]
    shard = desired["shards"][0]
    assert shard["threads"] == 1 and shard["args"] == ["--ctx-size", "512"] and shard["gpus"] == []
    assert shard["model_path"] is None and shard["source"] == "hf://x/tiny"


def test_a_held_model_spreads_its_replicas_over_empty_nodes(make_node, agent_client):
    # Both in rack r1 (the payload's label): the nodes themselves differ.
    for name in ("cpu-1", "cpu-2"):
        _, credential = make_node(name)
        agent = agent_client(credential)
        agent.post("register", registration(name))
        agent.post("heartbeat", heartbeat(name))
    catalog.apply_text(CATALOG)
    reconciler.reconcile_all()
    nodes = Shard.objects.filter(replica__model__name="tiny").values_list("node__name", flat=True)
    assert sorted(nodes) == ["cpu-1", "cpu-2"]


def test_reports_make_replicas_ready_and_the_api_shows_measured_against_reserved(node, api):
    reconciler.reconcile_all()
    ids = [s["id"] for s in report(node, {})["desired"]["shards"]]
    report(node, {sid: "ready" for sid in ids})
    assert set(Replica.objects.values_list("state", flat=True)) == {"ready"}
    model = api.get("/api/v1/models/tiny").json()
    [first, _] = model["replicas"]
    assert first["nodes"][0]["state"] == "ready" and first["nodes"][0]["memory_bytes"] == 3 * 10**9
    assert first["warnings"] == [
        "cpu-1: uses 2.79 GiB of memory, reserved 2.00 GiB; raise it with llmgw ctl model resources"
    ]


@pytest.mark.parametrize(
    ("memory_gb", "used", "says"),
    [
        # The operator's report: 90.8 MiB against 50 read "0.1 GB, reserved 0.1 GB".
        (50 / 1024, int(90.8 * 2**20), "uses 90.8 MiB of memory, reserved 50.0 MiB"),
        # memory_gb is GiB; digits until the two numbers differ.
        (2, 2 * 2**30 + 2**22, "uses 2.004 GiB of memory, reserved 2.000 GiB"),
    ],
)
def test_a_memory_warning_reads_two_different_numbers_differently(node, api, memory_gb, used, says):
    catalog.set_resources("tiny", memory_gb=memory_gb, cpu_cores=None)
    reconciler.reconcile_all()
    ids = [s["id"] for s in report(node, {})["desired"]["shards"]]
    report(node, {sid: "ready" for sid in ids}, memory_bytes=used)
    [first, _] = api.get("/api/v1/models/tiny").json()["replicas"]
    assert first["nodes"][0]["reserved_memory_bytes"] == int(memory_gb * 2**30)
    assert first["warnings"] == [f"cpu-1: {says}; raise it with llmgw ctl model resources"]


def test_a_failed_replica_is_released_whole_and_replaced(node):
    reconciler.reconcile_all()
    ids = [s["id"] for s in report(node, {})["desired"]["shards"]]
    report(node, {ids[0]: "failed", ids[1]: "ready"}, message="exit status 139")
    # The heartbeat's on_commit reconcile ran eagerly; whatever ran, the count holds.
    reconciler.reconcile_all()
    replicas = Replica.objects.filter(model__name="tiny")
    assert replicas.count() == 2
    assert f"r{replicas.order_by('pk').last().pk}-0" not in ids
    assert ids[0] not in [s["id"] for s in report(node, {ids[1]: "ready"})["desired"]["shards"]]


def test_lowering_always_running_takes_replicas_back(node, api):
    reconciler.reconcile_all()
    assert (
        api.patch(
            "/api/v1/models/tiny", {"always_running": 1, "under_load": 1}, format="json"
        ).status_code
        == 200
    )
    reconciler.reconcile_all()
    assert Replica.objects.filter(model__name="tiny").count() == 1


def test_under_load_scales_up_after_staying_loaded_and_back_after_idle(node, monkeypatch):
    depth = {"tiny": 5.0}
    monkeypatch.setattr(reconciler, "queue_depth", lambda name: depth.get(name))
    model = Model.objects.get(name="tiny")
    t0 = timezone.now()
    reconciler.reconcile_model(model, t0)
    assert Replica.objects.count() == 2  # loaded, but not for long enough yet
    reconciler.reconcile_model(model, t0 + timedelta(seconds=31))
    assert Replica.objects.count() == 3
    reconciler.reconcile_model(model, t0 + timedelta(seconds=70))
    assert Replica.objects.count() == 3  # under_load is the ceiling
    depth["tiny"] = 0.0
    reconciler.reconcile_model(model, t0 + timedelta(seconds=100))
    reconciler.reconcile_model(model, t0 + timedelta(seconds=200))
    assert Replica.objects.count() == 3  # idle, not for long enough
    reconciler.reconcile_model(model, t0 + timedelta(seconds=100 + 301))
    assert Replica.objects.count() == 2
    reconciler.reconcile_model(model, t0 + timedelta(seconds=2000))
    assert Replica.objects.count() == 2  # never below always_running


# Committed as production commits it: inside a transaction that changed
# the nodes itself, placement reads them again from inside it, alone.
@pytest.mark.django_db(transaction=True)
def test_a_replica_placed_by_hand_is_held_not_taken_back(node, api, django_assert_num_queries):
    # Nothing held: the reconciler keeps no replica of its own.
    api.patch("/api/v1/models/tiny", {"always_running": 0, "under_load": 0}, format="json")
    # A cold warm fleet and engine catalog (each test starts with neither):
    # the fleet read whole before the transaction, the catalog's versions
    # and rows, the decision stored and checked against its locked node;
    # the answer says where and judges no node. The model row is locked
    # with placement's lock and the count raised in the statement that
    # stores the replica (placing.place_held). The whole read takes each
    # node's pk with its view, reading no names apart.
    with django_assert_num_queries(26):
        placed = api.post("/api/v1/models/tiny/place")
    assert placed.status_code == 201, placed.json()
    body = placed.json()
    assert body["always_running"] == {"before": 0, "after": 1}
    assert "always_running raised from 0 to 1" in body["held"]
    reconciler.reconcile_all()
    assert list(Replica.objects.values_list("pk", flat=True)) == [body["replica"]]
    assert api.get("/api/v1/models/tiny").json()["always_running"] == 1


def test_a_replica_placed_by_hand_fills_a_held_count_it_falls_short_of(node, api):
    # always_running 2 with one replica running (the second could not be
    # placed then): the hand-placed one is the second, nothing is raised.
    reconciler.reconcile_all()
    placing.release_replica(Replica.objects.order_by("pk").last().pk)
    body = api.post("/api/v1/models/tiny/place").json()
    assert body["always_running"] == {"before": 2, "after": 2}
    assert body["held"] == "held as one of always_running 2"
    reconciler.reconcile_all()
    assert Replica.objects.count() == 2


def test_a_held_placement_counts_live_replicas_and_raises_under_load_with_them(node, api):
    # always_running 2, under_load 3. A failed replica is not counted, the
    # new one is; under_load, a ceiling at or above always_running, rises
    # with it once passed, and stays 0 (unset) when it was.
    reconciler.reconcile_all()
    Replica.objects.filter(pk=Replica.objects.order_by("pk").first().pk).update(state="failed")
    counts = [api.post("/api/v1/models/tiny/place").json()["always_running"] for _ in range(3)]
    assert counts == [
        {"before": 2, "after": 2},
        {"before": 2, "after": 3},
        {"before": 3, "after": 4},
    ]
    model = Model.objects.get(name="tiny")
    assert (model.always_running, model.under_load) == (4, 4)
    api.patch("/api/v1/models/tiny", {"always_running": 4, "under_load": 0}, format="json")
    assert api.post("/api/v1/models/tiny/place").json()["always_running"]["after"] == 5
    assert Model.objects.values_list("under_load", flat=True).get(name="tiny") == 0


def test_a_hand_placement_during_a_reconcile_tick_is_kept(node, api):
    api.patch("/api/v1/models/tiny", {"always_running": 0, "under_load": 0}, format="json")
    # The tick read the model (always_running 0) before the operator placed.
    model = Model.objects.get(name="tiny")
    replica = api.post("/api/v1/models/tiny/place").json()["replica"]
    done = reconciler.reconcile_model(model)
    assert done["released"] == []
    assert list(Replica.objects.values_list("pk", flat=True)) == [replica]


def test_taking_back_releases_what_serves_least_not_ready_then_newest(node, api):
    reconciler.reconcile_all()
    api.post("/api/v1/models/tiny/place")  # a third, held: always_running 3
    first, second, third = Replica.objects.order_by("pk")
    ids = {f"r{r.pk}-0": r for r in (first, second, third)}
    report(node, {sid: "ready" for sid, r in ids.items() if r != second})
    api.patch("/api/v1/models/tiny", {"always_running": 1, "under_load": 1}, format="json")
    done = reconciler.reconcile_all()["tiny"]
    # second is not ready: it goes first; then third, the newer ready one.
    assert done["released"] == [second.pk, third.pk]
    assert list(Replica.objects.values_list("pk", flat=True)) == [first.pk]


@pytest.mark.django_db(transaction=True)
def test_ctl_place_says_the_replica_is_held(node, live_server, operator, monkeypatch, capsys):
    Model.objects.filter(name="tiny").update(always_running=0, under_load=0)
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    assert ctl.main(["place", "tiny"]) == 0
    [replica] = Replica.objects.values_list("pk", flat=True)
    out = capsys.readouterr().out
    assert out.rstrip().endswith(
        f"replica #{replica}: always_running raised from 0 to 1 so the reconciler keeps "
        "this replica; lower it with llmgw ctl model scale tiny --always-running N"
    )
    reconciler.reconcile_all()
    assert list(Replica.objects.values_list("pk", flat=True)) == [replica]


def test_shards_changing_state_together_ask_for_one_reconcile(
    node, django_capture_on_commit_callbacks
):
    """Each shard report that changes a state asks for a reconcile; one
    asked for and not yet started reads every change after it, so the
    rest ride on it (counted on the real broker), and once it has started
    the next change asks again."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    cache.delete(tasks.SOON_KEY)
    reconciler.reconcile_all()
    ids = [s["id"] for s in report(node, {})["desired"]["shards"]]
    before = broker.llen("celery")
    try:
        for state in ("starting", "loading", "ready"):
            with django_capture_on_commit_callbacks(execute=True) as asked:
                report(node, {i: state for i in ids})
            assert asked, "a shard report that changed states asked for nothing"
        assert broker.llen("celery") - before == 1
        tasks.reconcile()  # the task starting, as a worker runs it
        with django_capture_on_commit_callbacks(execute=True):
            report(node, {ids[0]: "failed", ids[1]: "ready"}, message="exit 1")
        assert broker.llen("celery") - before == 2
    finally:
        pushed = broker.llen("celery") - before
        if pushed > 0:
            broker.lpop("celery", pushed)
        cache.delete(tasks.SOON_KEY)
