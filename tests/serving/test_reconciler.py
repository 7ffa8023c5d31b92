"""Held models on the control plane: desired shards go out with heartbeat
answers, shard reports come back, the reconciler keeps the counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.serving import reconciler
from llmgw.serving.models import Replica
from tests.payloads import heartbeat, registration

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
