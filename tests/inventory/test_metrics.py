"""/metrics: the fleet, with unknown and stale left out rather than zeroed."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from llmgw.catalog.models import Model, Profile
from llmgw.inventory.models import Node
from llmgw.serving.models import HeldState, Replica, Shard
from tests.metrics_text import samples
from tests.payloads import heartbeat, registration
from tests.tokens import make_token


def scrape(api) -> dict[str, dict[tuple, float]]:
    response = api.get("/metrics")
    assert response.status_code == 200
    return samples(response.content.decode())


def test_metrics_export_the_fleet(make_node, agent_client, api):
    _, credential = make_node("gpu-1")
    agent_client(credential).post("register", registration("gpu-1"))
    agent_client(credential).post("heartbeat", heartbeat("gpu-1"))
    m = scrape(api)
    node = (("node", "gpu-1"),)
    assert m["llmgw_node_up"][node] == 1
    assert m["llmgw_node_cpus"][node] == 192
    assert m["llmgw_node_memory_bytes"][node] == 1623497637888
    assert m["llmgw_node_cpu_utilization_percent"][node] == 12.5
    assert m["llmgw_node_load"][(("node", "gpu-1"), ("window", "5m"))] == 0.5
    assert m["llmgw_node_memory_available_bytes"][node] == 90 * 2**30
    lustre = (("mount", "/lustre"), ("node", "gpu-1"), ("shared", "true"))
    assert m["llmgw_node_filesystem_free_bytes"][lustre] == 500 * 2**40
    assert (
        m["llmgw_node_filesystem_size_bytes"][
            (("mount", "/data"), ("node", "gpu-1"), ("shared", "false"))
        ]
        == 1000 * 2**30
    )


def test_unknown_is_absent_not_zero(make_node, agent_client, api):
    _, credential = make_node("old-agent")
    agent_client(credential).post("register", registration("old-agent", system={}))
    payload = heartbeat("old-agent")
    del payload["filesystems"]
    agent_client(credential).post("heartbeat", payload)
    m = scrape(api)
    node = (("node", "old-agent"),)
    assert m["llmgw_node_up"][node] == 1
    assert node not in m.get("llmgw_node_cpus", {})
    assert node not in m.get("llmgw_node_memory_bytes", {})
    assert not any(
        ("node", "old-agent") in key for key in m.get("llmgw_node_filesystem_free_bytes", {})
    )


def test_a_measurement_older_than_a_minute_is_left_out(make_node, agent_client, api):
    node, credential = make_node("gpu-1")
    agent_client(credential).post("register", registration("gpu-1"))
    agent_client(credential).post("heartbeat", heartbeat("gpu-1"))
    old = timezone.now() - timedelta(seconds=61)
    Node.objects.filter(pk=node.pk).update(measured_at=old, filesystems_reported_at=old)
    m = scrape(api)
    assert (("node", "gpu-1"),) not in m.get("llmgw_node_cpu_utilization_percent", {})
    assert (("node", "gpu-1"),) not in m.get("llmgw_node_memory_used_bytes", {})
    assert not m.get("llmgw_node_filesystem_free_bytes")
    # What the node is does not go stale; only what it measured.
    assert m["llmgw_node_memory_bytes"][(("node", "gpu-1"),)] == 1623497637888


def test_prometheus_bearer_token_is_accepted(make_node, operator, client):
    token = make_token(operator)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401


COLLECTORS = [
    {"name": "cpu", "ok": True, "seconds": 0.004},
    {"name": "gpu", "ok": False, "seconds": 1.5, "error": "NVML: driver not loaded"},
]


def test_each_collector_reports_success_and_duration(make_node, agent_client, api):
    _, credential = make_node("gpu-1")
    make_node("quiet")
    agent = agent_client(credential)
    agent.post("register", registration("gpu-1"))
    agent.post("heartbeat", heartbeat("gpu-1", collectors=COLLECTORS))
    m = scrape(api)
    cpu = (("collector", "cpu"), ("node", "gpu-1"))
    gpu = (("collector", "gpu"), ("node", "gpu-1"))
    assert m["llmgw_node_collector_success"] == {cpu: 1, gpu: 0}
    assert m["llmgw_node_collector_duration_seconds"] == {cpu: 0.004, gpu: 1.5}
    assert (("node", "gpu-1"),) in m["llmgw_node_last_heartbeat_timestamp_seconds"]
    # A node that never sent a heartbeat has no age and no collectors.
    assert (("node", "quiet"),) not in m["llmgw_node_last_heartbeat_timestamp_seconds"]


def test_collectors_never_reported_or_gone_stale_are_absent(make_node, agent_client, api):
    node, credential = make_node("old-agent")
    agent = agent_client(credential)
    agent.post("register", registration("old-agent"))
    agent.post("heartbeat", heartbeat("old-agent"))
    assert not scrape(api).get("llmgw_node_collector_success")
    agent.post("heartbeat", heartbeat("old-agent", collectors=COLLECTORS))
    assert len(scrape(api)["llmgw_node_collector_success"]) == 2
    # Each heartbeat replaces the last one's results: a collector dropped
    # from the report is gone, not frozen at its old value.
    agent.post("heartbeat", heartbeat("old-agent", collectors=COLLECTORS[:1]))
    assert set(scrape(api)["llmgw_node_collector_success"]) == {
        (("collector", "cpu"), ("node", "old-agent"))
    }
    old = timezone.now() - timedelta(seconds=61)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=old)
    m = scrape(api)
    assert not m.get("llmgw_node_collector_success")
    assert not m.get("llmgw_node_collector_duration_seconds")
    assert m["llmgw_node_last_heartbeat_timestamp_seconds"][(("node", "old-agent"),)] == (
        old.timestamp()
    )


def test_held_models_export_wanted_and_ready_replicas(make_node, api):
    node, _ = make_node("gpu-1")
    held = Model.objects.create(name="qwen", source="hf://x/qwen", always_running=2, under_load=4)
    Model.objects.create(name="idle", source="hf://x/idle")
    profile = Profile.objects.create(model=held, name="cpu")
    for state in ("ready", "loading"):
        replica = Replica.objects.create(model=held, profile=profile, state=state)
        Shard.objects.create(replica=replica, node=node, rank=0, state=state)
    HeldState.objects.create(model=held, target=3)
    m = scrape(api)
    qwen, idle = (("model", "qwen"),), (("model", "idle"),)
    assert m["llmgw_model_replicas_always_running"] == {qwen: 2, idle: 0}
    assert m["llmgw_model_replicas_under_load"] == {qwen: 4, idle: 0}
    # The reconciler has not worked on "idle": its target is unknown.
    assert m["llmgw_model_replicas_target"] == {qwen: 3}
    assert m["llmgw_model_replicas"][(("model", "qwen"), ("state", "ready"))] == 1
    assert m["llmgw_model_replicas"][(("model", "qwen"), ("state", "loading"))] == 1
    assert m["llmgw_model_replicas"][(("model", "idle"), ("state", "ready"))] == 0
    assert m["llmgw_model_shards"][(("model", "qwen"), ("state", "ready"))] == 1
