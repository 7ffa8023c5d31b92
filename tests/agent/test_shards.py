"""The shard supervisor with the real llama-server (b11434) and a real, tiny model.

The model is made in the test (tests/serving_models.py); nothing is downloaded. Every wait
has a deadline and then asserts the state, so a slow machine is slower, not flaky.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from llmgw_agent.shards import ShardSupervisor, Timing

from tests.agent.engine_helpers import TAG
from tests.serving_models import make_tiny_gguf

pytestmark = pytest.mark.slow

FAST = Timing(poll_s=0.05, ready_check_s=0.5, backoff_s=0.2, grace_s=5.0)
DEADLINE_S = 60


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[ShardSupervisor]:
    sup = ShardSupervisor(log_dir=tmp_path / "shards", timing=FAST)
    try:
        yield sup
    finally:
        sup.close(grace_s=5)


def shard(model_path: Path | str, **kw: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "id": "r12-0", "replica": 12, "rank": 0, "model": "tiny", "engine": "llama.cpp",
        "engine_version": TAG, "model_path": str(model_path), "source": None,
        "args": ["--ctx-size", "512"], "threads": 1, "gpus": [], "env": {}, "generation": 1,
    }  # fmt: skip
    raw.update(kw)
    return raw


def wait_for(
    sup: ShardSupervisor, check: Callable[[dict[str, Any]], bool], shard_id: str = "r12-0"
) -> dict[str, Any]:
    """The shard's report entry once `check` holds; fails with the last one seen."""
    deadline = time.monotonic() + DEADLINE_S
    entry: dict[str, Any] = {}
    while time.monotonic() < deadline:
        found = [e for e in sup.report() if e["id"] == shard_id]
        entry = found[0] if found else {}
        if check(entry):
            return entry
        time.sleep(0.05)
    pytest.fail(f"shard {shard_id} never got there; last: {entry}; {sup.history(shard_id)}")


def ready(entry: dict[str, Any]) -> bool:
    return entry.get("state") == "ready"


def gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_gone(pgid: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not gone(pgid):
        assert time.monotonic() < deadline, f"process group {pgid} is still there"
        time.sleep(0.05)


def chat(url: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_pending_until_the_engine_is_installed_then_ready_and_answering(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tiny_model: Path
) -> None:
    installing = {
        "name": "llama.cpp", "version": TAG, "status": "installing", "path": None,
        "message": f"downloading llama-{TAG}-bin-ubuntu-x64.tar.gz (16 MB, 42%)",
    }  # fmt: skip
    supervisor.converge([shard(tiny_model)], [installing])
    entry = wait_for(supervisor, lambda e: bool(e.get("message")))
    assert entry["state"] == "pending"
    assert entry["message"] == (
        f"waiting for llama.cpp {TAG}: installing: "
        f"downloading llama-{TAG}-bin-ubuntu-x64.tar.gz (16 MB, 42%)"
    )
    assert (entry["pid"], entry["url"], entry["restarts"], entry["generation"]) == (
        None, None, 0, 1,
    )  # fmt: skip
    assert "cpu_cores" not in entry and "memory_bytes" not in entry  # nothing runs

    supervisor.converge([shard(tiny_model)], engines)
    entry = wait_for(supervisor, ready)
    history = supervisor.history("r12-0")
    assert history[0].startswith("pending: waiting for llama.cpp")
    assert any(h.startswith("starting") for h in history)
    assert history[-1] == "ready"
    assert entry["url"].startswith("http://127.0.0.1:")
    assert (entry["replica"], entry["restarts"], entry["message"]) == (12, 0, "")
    assert entry["since"].endswith("Z")

    body = chat(entry["url"])
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] > 0

    # The command line the agent built, as the process itself has it.
    process = psutil.Process(entry["pid"])
    cmdline = process.cmdline()
    port = entry["url"].rsplit(":", 1)[1]
    assert cmdline[1:] == [
        "-m", str(tiny_model / "tiny.gguf"), "--host", "127.0.0.1", "--port", port,
        "-t", "1", "--metrics", "--ctx-size", "512",
    ]  # fmt: skip
    assert process.environ()["CUDA_VISIBLE_DEVICES"] == ""
    assert os.getpgid(entry["pid"]) == entry["pid"]  # its own group
    metrics = httpx.get(f"{entry['url']}/metrics", timeout=10).text
    assert "llamacpp:requests_deferred" in metrics

    # Measured from the process group: llama-server's own resident memory, and the cores
    # it used loading the model and answering.
    entry = wait_for(supervisor, lambda e: "cpu_cores" in e and "memory_bytes" in e)
    rss = process.memory_info().rss
    assert 0.5 * rss < entry["memory_bytes"] < 2 * rss
    assert entry["cpu_cores"] >= 0


def test_a_killed_engine_fails_with_its_status_and_last_lines_then_restarts(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tiny_model: Path
) -> None:
    supervisor.converge([shard(tiny_model)], engines)
    first = wait_for(supervisor, ready)
    os.killpg(first["pid"], signal.SIGKILL)
    entry = wait_for(supervisor, lambda e: ready(e) and e["restarts"] == 1)
    assert entry["pid"] != first["pid"]
    assert entry["url"] == first["url"]  # the port is kept when it is still free
    failed = [h for h in supervisor.history("r12-0") if h.startswith("failed")]
    assert len(failed) == 1
    # Its words: the status, then the last lines llama-server wrote before it died.
    assert failed[0].startswith("failed: killed by SIGKILL: ")
    assert failed[0].endswith(" (restarting in 0.2 s)")
    log = (supervisor.log_dir / "r12-0.log").read_text()
    run = log.split("=== llmgw-agent ")[1]
    last = [line.strip() for line in run.splitlines() if line.strip()][-1]
    assert last in failed[0]
    assert any(h.startswith("starting: restart 1 after: killed by SIGKILL") for h in
               supervisor.history("r12-0"))  # fmt: skip
    chat(entry["url"])


def test_a_shard_no_longer_wanted_is_stopped_and_forgotten(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tiny_model: Path
) -> None:
    supervisor.converge([shard(tiny_model)], engines)
    pid = wait_for(supervisor, ready)["pid"]
    supervisor.converge([], engines)
    wait_for(supervisor, lambda e: e == {})
    assert supervisor.history("r12-0")[-2:] == ["stopping: no longer wanted", "stopped"]
    assert supervisor.report() == []
    wait_gone(pid)
    assert not psutil.pid_exists(pid)


def test_a_new_generation_restarts_the_shard(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tiny_model: Path
) -> None:
    supervisor.converge([shard(tiny_model)], engines)
    first = wait_for(supervisor, ready)
    supervisor.converge([shard(tiny_model, generation=2, args=["--ctx-size", "256"])], engines)
    entry = wait_for(supervisor, lambda e: ready(e) and e["generation"] == 2)
    assert entry["pid"] != first["pid"] and entry["restarts"] == 0
    assert "stopping: restarting for generation 2 (was 1)" in supervisor.history("r12-0")
    assert psutil.Process(entry["pid"]).cmdline()[-2:] == ["--ctx-size", "256"]
    wait_gone(first["pid"])


def test_missing_weights_wait_with_a_clear_message_then_start(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tmp_path: Path
) -> None:
    folder = tmp_path / "later"
    supervisor.converge([shard(folder)], engines)
    entry = wait_for(supervisor, lambda e: bool(e.get("message")))
    assert (entry["state"], entry["message"]) == (
        "pending", f"model_path {folder} does not exist on this node",
    )  # fmt: skip
    # Made beside it, then renamed into place: the supervisor looks every 50 ms, and a
    # folder seen while it holds only a.gguf (a slow machine between the two writes)
    # would start the engine instead of failing.
    staging = tmp_path / "staging"
    staging.mkdir()
    make_tiny_gguf(staging / "a.gguf")
    make_tiny_gguf(staging / "b.gguf", seed=1)
    staging.rename(folder)
    entry = wait_for(supervisor, lambda e: e.get("state") == "failed")
    assert entry["message"].startswith(f"model_path {folder} holds 2 .gguf files (a.gguf, b.gguf)")
    (folder / "b.gguf").unlink()
    wait_for(supervisor, ready)


def test_a_bad_shard_is_reported_failed_and_the_others_run(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tiny_model: Path
) -> None:
    supervisor.converge(
        [shard(tiny_model), {"id": "bad", "engine": "llama.cpp", "gpus": "0"}], engines
    )
    bad = wait_for(supervisor, lambda e: bool(e), shard_id="bad")
    assert bad["state"] == "failed"
    assert bad["message"] == "refused: shard bad.gpus: expected GPU indices, got '0'"
    wait_for(supervisor, ready)


def test_an_engine_that_ignores_sigterm_is_killed_after_the_grace(
    engines: list[dict[str, Any]], tiny_model: Path, tmp_path: Path
) -> None:
    # A stand-in for a wedged engine: it ignores SIGTERM (ignoring survives exec).
    stubborn = tmp_path / "stubborn"
    stubborn.write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 600\n")
    stubborn.chmod(0o755)
    sup = ShardSupervisor(log_dir=tmp_path / "shards", timing=Timing(poll_s=0.05, grace_s=0.5))
    try:
        sup.converge([shard(tiny_model)], [{**engines[0], "path": str(stubborn)}])
        pid = wait_for(sup, lambda e: e.get("pid") is not None)["pid"]
        sup.converge([], engines)
        wait_for(sup, lambda e: e == {})
        wait_gone(pid)
        assert sup.history("r12-0")[-3:] == [
            "stopping: no longer wanted",
            "stopping: no longer wanted; ignored SIGTERM, killed",
            "stopped",
        ]
    finally:
        sup.close(grace_s=1)


def test_close_stops_every_group(
    engines: list[dict[str, Any]], tiny_model: Path, tmp_path: Path
) -> None:
    sup = ShardSupervisor(log_dir=tmp_path / "shards", timing=FAST)
    sup.converge([shard(tiny_model), shard(tiny_model, id="r13-0", replica=13)], engines)
    pids = [wait_for(sup, ready, shard_id=i)["pid"] for i in ("r12-0", "r13-0")]
    assert len(set(pids)) == 2
    urls = {e["url"] for e in sup.report()}
    assert len(urls) == 2  # a port each
    sup.close(grace_s=10)
    for pid in pids:
        assert gone(pid)
    assert sup.report() == []


def test_the_tiny_model_serves_every_endpoint_the_gateway_uses(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tiny_model: Path
) -> None:
    # Embeddings need --embeddings, and a pooling the OpenAI API can express: a llama
    # model's own is "none", which llama-server refuses for /v1/embeddings.
    args = ["--embeddings", "--pooling", "mean"]
    supervisor.converge([shard(tiny_model, args=args)], engines)
    url = wait_for(supervisor, ready)["url"]
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True},
        timeout=30,
    ) as answer:
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert len(events) >= 3
    answer = httpx.post(
        f"{url}/v1/completions", json={"prompt": "the", "max_tokens": 2}, timeout=30
    )
    assert answer.json()["object"] == "text_completion"
    answer = httpx.post(f"{url}/v1/embeddings", json={"input": "hello world"}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["data"][0]["embedding"]) == 64
    tokens = httpx.post(f"{url}/tokenize", json={"content": "hello world"}, timeout=30).json()
    assert len(tokens["tokens"]) == 2  # whole words: the pieces merge as SentencePiece does
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert "llamacpp:requests_processing" in metrics and "llamacpp:requests_deferred" in metrics


LOADING_ENGINE = """#!{python}
# Stands in for an engine whose model takes a while: /health answers 503 until the file
# named by the test appears (the tiny model loads too fast to be seen loading).
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

port = int(sys.argv[sys.argv.index("--port") + 1])
gate = Path({gate!r})


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if gate.exists() else 503)
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def test_loading_while_health_answers_503(
    supervisor: ShardSupervisor, engines: list[dict[str, Any]], tiny_model: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "loaded"
    engine = tmp_path / "slow-engine"
    engine.write_text(LOADING_ENGINE.format(python=sys.executable, gate=str(gate)))
    engine.chmod(0o755)
    supervisor.converge([shard(tiny_model)], [{**engines[0], "path": str(engine)}])
    entry = wait_for(supervisor, lambda e: e.get("state") == "loading")
    assert entry["message"] == "loading the model" and entry["pid"] is not None
    gate.touch()
    wait_for(supervisor, ready)
    states = [h.split(":")[0] for h in supervisor.history("r12-0")]
    assert states[-2:] == ["loading", "ready"]
    assert "starting" in states
