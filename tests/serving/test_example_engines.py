"""The shipped catalog's vLLM and SGLang models on the nodes that can run them.

A node learns from its desired state which engines to install, each with where to get
it; a GPU node installs vLLM and SGLang from their pinned packages (the agent's side is
tests/agent/test_engines_package.py) and reports them as it reports any engine; only
then does placement take it for the example's vLLM model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from llmgw_agent.engines.spec import PACKAGE, EngineSpec

from llmgw.catalog import services as catalog
from llmgw.serving import placing
from llmgw.serving.desired import engine_specs
from llmgw.serving.models import Replica
from tests.payloads import heartbeat, registration

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30


def h100s(n: int) -> list[dict]:
    return [
        {
            "index": i,
            "uuid": f"GPU-{i}",
            "name": "NVIDIA H100 80GB HBM3",
            "class": "H100-80GB",
            "memory_total_bytes": 80 * GiB,
        }
        for i in range(n)
    ]


def installed(name: str, version: str, path: str) -> dict:
    return {
        "name": name,
        "version": version,
        "status": "installed",
        "message": f"{Path(path).name} version {version}, {PACKAGE} build",
        "path": path,
    }


@pytest.fixture
def gpu_node(make_node, agent_client):
    catalog.apply_file(ROOT / "deploy" / "server.example.yaml")
    _, credential = make_node("gpu-1")
    agent = agent_client(credential)
    system = {**registration("gpu-1")["system"], "nvidia_driver": "570.124.06"}
    answer = agent.post("register", registration("gpu-1", system=system, gpus=h100s(8)))
    assert answer.status_code in (200, 201), answer.content
    return agent


def beat(agent, engines: list[dict]) -> dict:
    response = agent.post("heartbeat", heartbeat("gpu-1", engines=engines, engines_probed=True))
    assert response.status_code == 200, response.content
    return response.json()


def test_the_example_vllm_model_is_placed_once_the_node_has_installed_vllm(gpu_node):
    llama = installed("llama.cpp", "b11434", "/var/lib/llmgw/engines/llama-server")
    desired = beat(gpu_node, [llama])["desired"]["engines"]
    specs = {e["name"]: EngineSpec.parse(e) for e in desired}
    # Every engine the example uses goes out with a source a node can install it from.
    assert set(specs) == {"llama.cpp", "vllm", "sglang"}
    for name in ("vllm", "sglang"):
        package = specs[name].package
        assert package is not None and package.needs == "nvidia", name
    assert specs["llama.cpp"].package is not None and specs["llama.cpp"].package.needs is None

    # Not installed yet: refused, in so many words.
    replica, placement = placing.place_replica("llama-3.1-70b-instruct")
    assert replica is None
    assert "needs vllm" in placement.explanation.render(), placement.explanation.render()

    vllm = installed("vllm", specs["vllm"].version, "/var/lib/llmgw/engines/vllm/venv/bin/vllm")
    sglang = installed(
        "sglang", specs["sglang"].version, "/var/lib/llmgw/engines/sglang/venv/bin/python"
    )
    beat(gpu_node, [llama, vllm, sglang])
    replica, placement = placing.place_replica("llama-3.1-70b-instruct")
    assert replica is not None, placement.explanation.render()
    [shard] = replica.shards.all()
    assert shard.node.name == "gpu-1" and len(shard.gpu_indices) == 8


def test_a_node_without_an_nvidia_driver_is_not_sent_the_gpu_engines(
    gpu_node, make_node, agent_client
):
    _, credential = make_node("cpu-1")
    agent = agent_client(credential)
    agent.post("register", registration("cpu-1"))
    answer = agent.post("heartbeat", heartbeat("cpu-1", engines=[], engines_probed=True)).json()
    # Its agent would leave them alone; their locks would only weigh down every answer.
    assert [e["name"] for e in answer["desired"]["engines"]] == ["llama.cpp"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_gpu_model_of_the_example_is_placed_on_the_simulated_fleet(asgi_server, tmp_path):
    """The demo's fleet (H100 and A100 servers, an NVL72 rack of GB200 trays), each GPU
    node reporting the engines an agent installs from the example catalog: the vLLM
    models (one node of 8 H100s; two over InfiniBand) and the SGLang one (four trays of
    one NVLink domain) are all placed."""
    from llmgw.inventory import heartbeats
    from llmgw.inventory.models import Node
    from tests.console import fleet

    fleet.build(asgi_server, tmp_path)
    engines = {e["name"]: EngineSpec.parse(e) for e in engine_specs(set())}
    for node in Node.objects.exclude(nvidia_driver=""):
        report = [
            installed(name, engines[name].version, f"/var/lib/llmgw/engines/{name}")
            for name in ("llama.cpp", "vllm", "sglang")
        ]
        data = {"schema": 1, "node": node.name, "engines": report, "engines_probed": True}
        heartbeats.heartbeat(node, data)
    for model in ("llama-3.1-70b-instruct", "llama-3.1-405b-instruct", "deepseek-v3-671b"):
        replica, placement = placing.place_replica(model)
        assert replica is not None, f"{model}:\n{placement.explanation.render()}"
    [replica] = Replica.objects.filter(model__name="deepseek-v3-671b")
    trays = {s.node.name for s in replica.shards.all()}
    assert len(trays) == 4 and all(t.startswith("sim-gb200-") for t in trays), trays
