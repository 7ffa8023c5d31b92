"""`llmgw simulate --serve-shards`: a simulated node's shards start, are
ready after a jittered delay, and are answered by the simulator's one
endpoint, whose every answer says it comes from a simulated node and that
no model ran. Over real HTTP, with the official openai client."""

from __future__ import annotations

import asyncio
import random

import httpx
import msgspec
import openai
import pytest

from llmgw.simulator import engine
from llmgw.simulator.engine import Endpoint, ShardLife
from llmgw.simulator.fleet import make_fleet
from tests.simulator.engine_thread import running

MODEL = "qwen2.5-7b-instruct"
LO, HI = engine.READY_AFTER_S


def shard(i: int, generation: int = 1, rank: int = 0, model: str = MODEL) -> dict[str, object]:
    """A desired shard as the control plane's answer names it (llmgw.serving.desired)."""
    return {
        "id": f"r{i}-s{rank}",
        "replica": i,
        "rank": rank,
        "model": model,
        "engine": "llama.cpp",
        "generation": generation,
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_shard_starts_then_is_ready_after_its_jittered_delay() -> None:
    endpoint = Endpoint(url="http://127.0.0.1:4321")
    clock = Clock()
    life = ShardLife("sim-h100-04", endpoint, random.Random(1), clock)

    [first] = life.report([shard(7)])
    assert first["state"] == "starting" and first["replica"] == 7
    assert first["url"] == "http://127.0.0.1:4321" and first["pid"] is None
    assert first["message"] == f"simulated node: starting, as llama.cpp would load {MODEL}"
    assert endpoint.nodes_serving(MODEL) == []
    clock.now += LO - 0.01
    assert [s["state"] for s in life.report([shard(7)])] == ["starting"]
    clock.now += HI - LO + 0.02
    [ready] = life.report([shard(7)])
    assert ready["state"] == "ready"
    assert ready["message"].startswith("simulated node: no engine runs here")
    assert endpoint.nodes_serving(MODEL) == ["sim-h100-04"] and endpoint.models() == [MODEL]

    # Told again with a new generation: restarted, as an agent restarts its engine.
    [again] = life.report([shard(7, generation=2)])
    assert again["state"] == "starting" and again["generation"] == 2
    assert endpoint.nodes_serving(MODEL) == []
    # No longer wanted: gone at once, and no longer answered for.
    clock.now += HI
    life.report([shard(7, generation=2)])
    assert endpoint.nodes_serving(MODEL) == ["sim-h100-04"]
    assert life.report([]) == []
    assert endpoint.nodes_serving(MODEL) == [] and endpoint.models() == []


def test_each_node_loads_in_its_own_time_and_only_rank_0_is_answered_for() -> None:
    endpoint = Endpoint(url="http://127.0.0.1:4321")
    clock = Clock()
    lives = [ShardLife(f"sim-{i}", endpoint, random.Random(i), clock) for i in range(8)]
    due = []
    for life in lives:
        life.report([shard(1)])
        due.append(life.started["r1-s0"].ready_at - clock.now)
    assert all(LO <= d <= HI for d in due)
    assert len({round(d, 6) for d in due}) == len(due), "the delays are jittered"
    # A second rank of a multi-node replica is ready too, but requests go to rank 0.
    follower = ShardLife("sim-follower", endpoint, random.Random(9), clock)
    follower.report([shard(1, rank=1)])
    clock.now += HI
    assert [s["state"] for s in follower.report([shard(1, rank=1)])] == ["ready"]
    assert "sim-follower" not in endpoint.nodes_serving(MODEL)


def test_a_serving_nodes_heartbeat_passes_the_protocols_bounds() -> None:
    [sim] = make_fleet(1)
    endpoint = Endpoint(url="http://127.0.0.1:4321")
    sim.serving = endpoint.life(sim.name)
    sim.desired = {"engines": [], "shards": [shard(3)]}
    beat = msgspec.to_builtins(sim.heartbeat())
    [report] = beat["shards"]
    assert report["state"] == "starting" and report["url"] == "http://127.0.0.1:4321"
    # Without --serve-shards a node runs nothing, and says why.
    [plain] = make_fleet(1)
    plain.desired = sim.desired
    [pending] = msgspec.to_builtins(plain.heartbeat())["shards"]
    assert pending["state"] == "pending"
    assert pending["message"] == "simulated node: no engine runs here"


@pytest.fixture
def served() -> Endpoint:
    with running(Endpoint()) as endpoint:
        yield endpoint


def test_the_endpoint_answers_what_the_agent_and_the_gateway_ask(served: Endpoint) -> None:
    assert served.port >= 1024
    assert served.url == f"http://127.0.0.1:{served.port}"
    health = httpx.get(served.url + "/health")
    assert health.status_code == 200 and health.json() == {"status": "ok", "simulated": True}
    assert httpx.get(served.url + "/v1/models").json() == {"object": "list", "data": []}
    served.ready["sim-h100-04"] = {"r1-s0": MODEL}
    [listed] = httpx.get(served.url + "/v1/models").json()["data"]
    assert listed["id"] == MODEL and listed["owned_by"] == "llmgw-simulator"
    # The gateway scrapes /metrics for a queue: absent here, so unknown, not 0.
    assert httpx.get(served.url + "/metrics").status_code == 404


def test_every_answer_says_it_is_simulated_and_no_model_ran(served: Endpoint) -> None:
    served.ready["sim-h100-04"] = {"r1-s0": MODEL}
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
    said = f"simulated node sim-h100-04: no engine runs here; this is not an answer from {MODEL}"
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content == said
    assert chat.model == MODEL and chat.usage is None  # no tokens were counted
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream) == said
    assert client.completions.create(model=MODEL, prompt="hi").choices[0].text == said

    # Several nodes hold ready shards: one endpoint cannot tell which was picked.
    served.ready["sim-h100-11"] = {"r2-s0": MODEL}
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content == (
        "simulated nodes sim-h100-04, sim-h100-11 (the gateway picked one of them): "
        f"no engine runs on any of them; this is not an answer from {MODEL}"
    )
    with pytest.raises(openai.NotFoundError, match="no simulated node holds a ready shard of"):
        client.chat.completions.create(model="llama-3.1-70b-instruct", messages=[])


def test_a_bad_request_is_refused_naming_what_is_wrong(served: Endpoint) -> None:
    url = served.url + "/v1/chat/completions"
    bad = httpx.post(url, content=b"{not json")
    assert bad.status_code == 400
    assert bad.json()["error"]["message"].startswith("the request body is not JSON")
    nameless = httpx.post(url, json={"messages": []})
    assert nameless.status_code == 400
    assert nameless.json()["error"]["message"] == "model: a model name is required"


def test_a_port_already_taken_is_refused_naming_the_option(served: Endpoint) -> None:
    with pytest.raises(SystemExit, match=f"--serve-port: cannot listen on 127.0.0.1:{served.port}"):
        asyncio.run(Endpoint(port=served.port).start())
