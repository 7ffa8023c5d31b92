"""/metrics: the fleet, with unknown and stale left out rather than zeroed."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from llmgw.inventory.models import Node
from tests.payloads import heartbeat, registration
from tests.tokens import make_token


def scrape(api) -> dict[str, dict[tuple, float]]:
    response = api.get("/metrics")
    assert response.status_code == 200
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


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
