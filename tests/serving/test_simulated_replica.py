"""A request through the gateway to a model whose only ready replica is on a
simulated node (`llmgw simulate --serve-shards`) gets the simulator's plain
answer, that no model ran, never something passed off as the model's. The
control plane under uvicorn, the demo fleet joined through the agent API,
the simulator's endpoint over real HTTP, the official openai client."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import msgspec
import openai
import pytest

from llmgw.catalog.models import Model
from llmgw.serving import keys, reconciler
from llmgw.serving import services as serving
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica, Shard
from llmgw.simulator import engine
from llmgw.simulator.engine import Endpoint, ShardLife
from llmgw.simulator.fleet import make_fleet
from tests.simulator.engine_thread import running

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "server.example.yaml"
MODEL = "qwen2.5-7b-instruct"


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_model_served_only_by_a_simulated_node_gets_the_plainly_simulated_answer(
    asgi_server: str, make_node: Any, agent_client: Any, operator: Any
) -> None:
    clock = Clock()
    with running(Endpoint()) as endpoint:
        sims = make_fleet(12, nvl72_trays=0)
        agents = {}
        for sim in sims:
            _, credential = make_node(sim.name)
            agents[sim.name] = agent_client(credential)
            agents[sim.name].post("register", msgspec.to_builtins(sim.registration(10)))
            sim.serving = ShardLife(sim.name, endpoint, random.Random(sim.name), clock)
        serving.apply_catalog(EXAMPLE)

        def beat() -> None:
            for sim in sims:
                answer = agents[sim.name].post("heartbeat", msgspec.to_builtins(sim.heartbeat()))
                assert answer.status_code == 200, answer.content
                sim.desired = answer.json().get("desired")

        beat()  # told the catalog's engines: installed from here on
        Model.objects.filter(name=MODEL).update(always_running=1)
        reconciler.reconcile_all()
        beat()  # told the shard
        beat()  # reports it
        [shard] = Shard.objects.select_related("node", "replica")
        assert shard.state == ReplicaState.STARTING, shard.message
        assert shard.message.startswith("simulated node: starting")
        clock.now += engine.READY_AFTER_S[1]
        beat()
        shard.refresh_from_db()
        assert shard.url == endpoint.url and shard.state == ReplicaState.READY
        assert Replica.objects.get().state == ReplicaState.READY

        key = keys.create_key("simulated", operator, all_models=True).key
        client = openai.OpenAI(base_url=f"{asgi_server}/v1", api_key=key, max_retries=0)
        said = (
            f"simulated node {shard.node.name}: no engine runs here; "
            f"this is not an answer from {MODEL}"
        )
        ask = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        answer = until_routed(lambda: client.chat.completions.create(**ask))
        assert answer.choices[0].message.content == said
        assert answer.model == MODEL and answer.usage is None
        streamed = client.chat.completions.create(**ask, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in streamed) == said


def until_routed(call: Any, seconds: float = 15.0) -> Any:
    """The gateway reads its routes every second: a replica ready a moment
    ago is "not ready" (503) until then."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except openai.InternalServerError as exc:
            if exc.status_code != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.3)
