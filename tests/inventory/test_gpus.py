"""GPUs end to end: the agent's real collectors over a fake NVML built from
real nvidia-smi captures, posted through the agent API, stored, and read
by placement and the API."""

from __future__ import annotations

from typing import Any

from llmgw_agent.collectors.gpu import collect_gpus, collect_inventory

from llmgw.catalog import services as catalog
from llmgw.inventory.models import Gpu
from llmgw.placement import services as placement
from tests.agent.fake_nvml import fake, load_smi_q
from tests.agent.test_gpu import Clock, roots_for
from tests.payloads import heartbeat, registration

H100 = "nvidia-smi-q-H100x8-gpud-535.161.08.txt"
A100_PENDING = "nvidia-smi-q-remapped-rows-A100-stas00.txt"


def join_with_gpus(make_node, agent_client, name: str, capture: str) -> tuple[Any, Any, Any]:
    _, credential = make_node(name)
    clock = Clock()
    roots = roots_for(fake(*load_smi_q(capture)), clock=clock)
    agent = agent_client(credential)
    inventory = collect_inventory(roots)
    assert agent.post("register", registration(name, **inventory)).status_code == 200
    return agent, roots, clock


def test_registration_and_heartbeat_store_the_real_h100s(make_node, agent_client, api):
    agent, roots, _ = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    sample = collect_gpus(roots)
    response = agent.post("heartbeat", heartbeat("dgx-1", **sample))
    assert response.status_code == 200, response.content
    node = api.get("/api/v1/nodes/dgx-1").json()
    assert [g["gpu_class"] for g in node["gpus"]] == ["H100-80GB"] * 8
    assert node["gpus"][0]["uuid"] == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert node["gpus"][0]["healthy"] is True
    stored = Gpu.objects.get(node__name="dgx-1", index=0)
    assert stored.pcie_replays == 67 and stored.fabric == {
        "state": "completed",
        "status": "success",
    }
    assert stored.pci_bus_id == "0000:19:00.0"


def test_a_pending_row_remap_keeps_a_card_out_and_says_why(make_node, agent_client):
    agent, roots, _ = join_with_gpus(make_node, agent_client, "a100-1", A100_PENDING)
    assert agent.post("heartbeat", heartbeat("a100-1", **collect_gpus(roots))).status_code == 200
    pending = [
        g
        for g in Gpu.objects.filter(node__name="a100-1")
        if g.remapped_rows and g.remapped_rows.get("pending")
    ]
    assert pending, "the capture has a pending remap"
    assert all("row remap is pending" in g.unhealthy_reason for g in pending)
    catalog.apply_text(
        "models:\n  - name: m\n    source: x\n    profiles:\n"
        f"      - name: all\n        gpu_class: {pending[0].gpu_class}\n        gpus_per_shard: 8\n"
    )
    text = placement.dry_run("m").explanation.render()
    assert "row remap is pending" in text and "a100-1" in text


def test_a_hardware_xid_and_a_card_gone_from_the_driver(make_node, agent_client):
    agent, roots, clock = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    sample = collect_gpus(roots)["gpus"]
    sample[3]["xids"] = {"79": 1, "13": 4}
    gone = [g for g in sample if g["index"] != 5]
    assert agent.post("heartbeat", heartbeat("dgx-1", gpus=gone)).status_code == 200
    gpu3, gpu5, gpu2 = (Gpu.objects.get(node__name="dgx-1", index=i) for i in (3, 5, 2))
    assert gpu3.unhealthy_reason == "hardware XIDs: XID 79 x1"
    assert gpu5.missing and "no longer seen" in gpu5.unhealthy_reason
    assert gpu2.healthy
    # A heartbeat between the minute's readings changes none of it.
    clock.t += 5
    again = collect_gpus(roots)["gpus"]
    assert "xids" not in again[3]
    agent.post("heartbeat", heartbeat("dgx-1", gpus=[g for g in again if g["index"] != 5]))
    assert Gpu.objects.get(node__name="dgx-1", index=3).xids == {"79": 1, "13": 4}


def test_a_bad_gpu_sample_is_named(make_node, agent_client):
    agent, roots, _ = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    sample = collect_gpus(roots)["gpus"]
    sample[2]["utilization_percent"] = 180
    response = agent.post("heartbeat", heartbeat("dgx-1", gpus=sample))
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert list(errors) == ["gpus.2"] and "utilization_percent" in errors["gpus.2"][0]


def test_gpu_metrics_from_the_real_capture(make_node, agent_client, api):
    from tests.inventory.test_metrics import scrape

    agent, roots, _ = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    agent.post("heartbeat", heartbeat("dgx-1", **collect_gpus(roots)))
    m = scrape(api)
    gpu0 = (("class", "H100-80GB"), ("gpu", "0"), ("node", "dgx-1"))
    assert (
        m["llmgw_gpu_temperature_celsius"][(*gpu0[:2], ("node", "dgx-1"), ("sensor", "hbm"))] == 39
    )
    assert m["llmgw_gpu_power_watts"][gpu0] == 67.74
    assert m["llmgw_gpu_pcie_replay_total"][gpu0] == 67
    assert m["llmgw_gpu_healthy"][gpu0] == 1
    throttle = m["llmgw_gpu_throttle"]
    assert throttle[(*gpu0[:2], ("node", "dgx-1"), ("reason", "hw_power_brake_slowdown"))] == 1
    assert throttle[(*gpu0[:2], ("node", "dgx-1"), ("reason", "hw_thermal_slowdown"))] == 0
    # An H100's fabric names no multi-node domain: no joined metric at all.
    assert not m.get("llmgw_gpu_nvlink_joined")


def test_dashboards_and_alerts_only_use_metrics_llmgw_exports(api):
    import json
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "deploy"
    exported = {
        line.split()[2]
        for line in api.get("/metrics").content.decode().splitlines()
        if line.startswith("# TYPE")
    }
    dashboard = json.loads((root / "grafana" / "dashboards" / "llmgw-gpus.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has panels with queries"
    rules = yaml.safe_load((root / "prometheus" / "alerts.yml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = {name for e in exprs for name in re.findall(r"\bllmgw_[a-z_]+", e)}
    assert used and used <= exported, used - exported
