"""What a shard runs: engine lookup, weights, argv and environment; no process started.

vLLM and SGLang cannot run on this machine, so their command lines are checked as argv.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.config import parse_config
from llmgw_agent.shards import (
    GroupMeter,
    NotRunnable,
    ShardSpec,
    ShardSpecError,
    advertised_host,
    build_command,
    describe_exit,
    find_engine,
    pick_port,
    resolve_gguf,
)


def shard(**kw: Any) -> ShardSpec:
    raw: dict[str, Any] = {
        "id": "r12-0", "replica": 12, "rank": 0, "model": "qwen", "engine": "llama.cpp",
        "engine_version": "b11434", "model_path": None, "source": None, "args": [],
        "threads": None, "gpus": [], "env": {}, "generation": 3,
    }  # fmt: skip
    raw.update(kw)
    return ShardSpec.parse(raw)


def test_llama_cpp_argv_is_what_the_agent_sets_then_the_profiles_args(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    spec = shard(
        model_path=str(model), threads=16, args=["--ctx-size", "4096"], gpus=[0, 3],
        env={"NCCL_MNNVL_ENABLE": "1"},
    )  # fmt: skip
    command = build_command(spec, "/e/llama-server", "127.0.0.1", 18123)
    assert command.argv == (
        "/e/llama-server", "-m", str(model), "--host", "127.0.0.1", "--port", "18123",
        "-t", "16", "--metrics", "--ctx-size", "4096",
    )  # fmt: skip
    assert command.env == {"CUDA_VISIBLE_DEVICES": "0,3", "NCCL_MNNVL_ENABLE": "1"}


def test_no_threads_lets_the_engine_choose_and_no_gpus_hides_them_all(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    command = build_command(shard(model_path=str(tmp_path)), "/e/llama-server", "::", 1)
    assert "-t" not in command.argv
    assert command.argv[2] == str(tmp_path / "m.gguf")
    # "" is not unset: with it unset a CUDA build would take every GPU of the node.
    assert command.env == {"CUDA_VISIBLE_DEVICES": ""}


def test_vllm_argv(tmp_path: Path) -> None:
    spec = shard(engine="vllm", model_path=str(tmp_path), gpus=[0, 1, 2, 3], threads=8)
    command = build_command(spec, "/opt/vllm/bin/vllm", "0.0.0.0", 8000)
    assert command.argv == (
        "/opt/vllm/bin/vllm", "serve", str(tmp_path), "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "4",
    )  # fmt: skip
    assert command.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "OMP_NUM_THREADS": "8"}
    # The profile's own parallelism wins; it is not given twice.
    spec = shard(engine="vllm", source="hf://Qwen/Qwen2.5-7B", args=["-tp", "2"], gpus=[0, 1])
    argv = build_command(spec, "/v/vllm", "127.0.0.1", 1).argv
    assert argv[2] == "Qwen/Qwen2.5-7B"
    assert "--tensor-parallel-size" not in argv and argv[-2:] == ("-tp", "2")


def test_sglang_argv(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text("")
    spec = shard(
        engine="sglang",
        model_path=str(tmp_path),
        gpus=[4, 5],
        args=["--mem-fraction-static", "0.8"],
    )
    command = build_command(spec, str(tmp_path / "bin" / "sglang"), "127.0.0.1", 30000)
    assert command.argv == (
        str(tmp_path / "bin" / "python3"), "-m", "sglang.launch_server",
        "--model-path", str(tmp_path), "--host", "127.0.0.1", "--port", "30000",
        "--tp-size", "2", "--mem-fraction-static", "0.8",
    )  # fmt: skip
    argv = build_command(spec, "/opt/sgl/bin/python", "127.0.0.1", 1).argv
    assert argv[0] == "/opt/sgl/bin/python"


def test_an_engine_the_agent_cannot_run_is_failed() -> None:
    with pytest.raises(NotRunnable) as exc:
        build_command(shard(engine="trt-llm", source="hf://x"), "/x", "127.0.0.1", 1)
    assert exc.value.state == "failed"
    assert "'trt-llm' is not one this agent runs (llama.cpp, vllm, sglang)" in exc.value.message


def test_weights_not_on_the_node_wait(tmp_path: Path) -> None:
    with pytest.raises(NotRunnable) as exc:
        build_command(shard(source="hf://Qwen/x-GGUF"), "/e", "127.0.0.1", 1)
    assert (exc.value.state, exc.value.message) == (
        "pending",
        "the weights are not on this node (source hf://Qwen/x-GGUF): no model_path",
    )


def test_resolve_gguf(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(NotRunnable) as exc:
        resolve_gguf(str(missing))
    assert (exc.value.state, exc.value.message) == (
        "pending", f"model_path {missing} does not exist on this node",
    )  # fmt: skip
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "README.md").write_text("x")
    (folder / "mmproj-f16.gguf").write_bytes(b"x")  # a projector is not the model
    with pytest.raises(NotRunnable) as exc:
        resolve_gguf(str(folder))
    assert (exc.value.state, exc.value.message) == (
        "pending", f"model_path {folder} holds no .gguf file",
    )  # fmt: skip
    (folder / "a-Q4_K_M.gguf").write_bytes(b"x")
    assert resolve_gguf(str(folder)) == folder / "a-Q4_K_M.gguf"
    (folder / "a-Q8_0.gguf").write_bytes(b"x")
    with pytest.raises(NotRunnable) as exc:
        resolve_gguf(str(folder))
    assert exc.value.state == "failed"
    assert exc.value.message == (
        f"model_path {folder} holds 2 .gguf files (a-Q4_K_M.gguf, a-Q8_0.gguf): cannot tell "
        "which one to load; keep one model there, or name the file"
    )
    assert resolve_gguf(str(folder / "a-Q8_0.gguf")) == folder / "a-Q8_0.gguf"
    split = tmp_path / "split"
    split.mkdir()
    for i in (1, 2, 3):
        (split / f"big-{i:05d}-of-00003.gguf").write_bytes(b"x")
    # llama-server is given the first part and finds the others beside it.
    assert resolve_gguf(str(split)) == split / "big-00001-of-00003.gguf"


INSTALLED = {"name": "llama.cpp", "version": "b11434", "status": "installed", "message": "ok", "path": "/e/llama-server"}  # fmt: skip


def test_find_engine_in_the_managers_words() -> None:
    spec = shard()
    assert find_engine(spec, [INSTALLED]) == "/e/llama-server"
    installing = {
        **INSTALLED, "status": "installing", "path": None,
        "message": "downloading llama-b11434-bin-ubuntu-x64.tar.gz (16 MB, 42%)",
    }  # fmt: skip
    with pytest.raises(NotRunnable) as exc:
        find_engine(spec, [installing])
    assert exc.value.message == (
        "waiting for llama.cpp b11434: installing: "
        "downloading llama-b11434-bin-ubuntu-x64.tar.gz (16 MB, 42%)"
    )
    with pytest.raises(NotRunnable) as exc:
        find_engine(spec, [{**INSTALLED, "version": "b11500"}])
    assert exc.value.message == "waiting for llama.cpp b11434: not installed on this node"
    # An engine agent.yaml names is the operator's choice, whatever version it prints.
    vllm = {"name": "vllm", "version": "0.6.3", "status": "installed", "path": "/opt/vllm/bin/vllm"}
    spec = shard(engine="vllm", engine_version="0.6.4")
    assert find_engine(spec, [vllm], configured={"vllm"}) == "/opt/vllm/bin/vllm"
    with pytest.raises(NotRunnable):
        find_engine(spec, [vllm])


def test_spec_refuses_bad_fields() -> None:
    with pytest.raises(ShardSpecError, match="shard id must be a non-empty string"):
        ShardSpec.parse({"engine": "llama.cpp"})
    with pytest.raises(ShardSpecError, match=r"shard a\.gpus: expected GPU indices"):
        ShardSpec.parse({"id": "a", "engine": "llama.cpp", "gpus": ["0"]})
    with pytest.raises(ShardSpecError, match=r"shard a\.threads: expected an integer"):
        ShardSpec.parse({"id": "a", "engine": "llama.cpp", "threads": True})
    spec = ShardSpec.parse({"id": "a", "engine": "llama.cpp"})
    assert (spec.generation, spec.gpus, spec.args, spec.threads) == (0, (), (), None)


def test_serve_and_advertise_hosts_in_agent_yaml(tmp_path: Path) -> None:
    base = "server_url: http://x\ncredential_file: c\n"
    config = parse_config(base, base=tmp_path)
    assert (config.serve_host, config.advertise_host) == ("127.0.0.1", None)
    config = parse_config(base + "serve_host: 0.0.0.0\nadvertise_host: 10.0.0.5\n", base=tmp_path)
    assert (config.serve_host, config.advertise_host) == ("0.0.0.0", "10.0.0.5")
    assert advertised_host("0.0.0.0", "10.0.0.5") == "10.0.0.5"
    assert advertised_host("10.1.1.1", None) == "10.1.1.1"
    # A wildcard is no address to give out: the node's own is advertised.
    primary = advertised_host("0.0.0.0", None)
    assert primary not in ("0.0.0.0", "")
    socket.inet_aton(primary)


def test_pick_port_keeps_a_free_preferred_port() -> None:
    port = pick_port("127.0.0.1")
    assert pick_port("127.0.0.1", prefer=port) == port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        assert pick_port("127.0.0.1", prefer=port) != port


def test_describe_exit() -> None:
    assert describe_exit(1) == "exited with status 1"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-15) == "killed by SIGTERM"


CHILD = """
import sys, time
held = b"x" * (64 << 20)  # written, so resident
while time.process_time() < 0.5:
    pass
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def test_group_meter_sums_every_process_of_the_group(tmp_path: Path) -> None:
    # A shell and two children in a session of their own, each child holding 64 MB and
    # burning half a CPU second: the group's sum says 1 s and 128 MB, whatever the clock.
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    py = sys.executable
    script = f"{py} {child} {tmp_path}/a & {py} {child} {tmp_path}/b & wait"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        meter = GroupMeter(proc.pid, time.monotonic())
        deadline = time.monotonic() + 60
        while not ((tmp_path / "a").exists() and (tmp_path / "b").exists()):
            assert time.monotonic() < deadline, "the children did not finish burning"
            time.sleep(0.05)
        assert len(meter.members()) == 3
        since = meter.at
        cores, memory = meter.sample()
        assert cores is not None and memory is not None
        used = cores * (meter.at - since)
        assert used >= 0.95  # /proc counts whole clock ticks (10 ms), truncated
        assert memory >= 128 << 20
        # The next interval: the children only sleep.
        since = meter.at
        cores, _ = meter.sample()
        assert cores is not None and cores * (meter.at - since) < 0.5
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    while GroupMeter(proc.pid, 0).members():  # the children are reaped by init
        assert time.monotonic() < deadline, "the killed children stayed"
        time.sleep(0.05)
    assert GroupMeter(proc.pid, 0).sample() == (None, None)  # unknown, never 0
