"""What a shard runs: its engine's binary, its weights, its command line and environment.

Everything here is a function of the spec and the node; nothing is started. A reason a
shard cannot start is a `NotRunnable` with the state to report it in: `pending` when time
can fix it (the engine is installing, the weights are not there yet), `failed` when only
a person can (two .gguf files where one is wanted, an engine the agent cannot run).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .spec import ShardSpec

ENGINES = ("llama.cpp", "vllm", "sglang")
# llama.cpp's split models: model-00001-of-00003.gguf; llama-server takes the first and
# finds the rest beside it.
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")


class NotRunnable(Exception):
    def __init__(self, message: str, state: Literal["pending", "failed"] = "pending") -> None:
        super().__init__(message)
        self.message, self.state = message, state


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: dict[str, str]  # set on top of the agent's own environment


def find_engine(
    spec: ShardSpec, engines: Sequence[Mapping[str, Any]], configured: Collection[str] = ()
) -> str:
    """The path of the installed engine the shard names, from the heartbeat's `engines`.

    The exact name and version first; else the engine agent.yaml names (`configured`): an
    operator who points the agent at a vLLM or llama-server on purpose means that one,
    whatever version string it prints. Otherwise the node's own words about it.
    """
    wanted = f"{spec.engine} {spec.engine_version}" if spec.engine_version else spec.engine
    same_name = [e for e in engines if e.get("name") == spec.engine]
    exact = [e for e in same_name if spec.engine_version in (None, e.get("version"))]
    for entry in exact:
        if entry.get("status") == "installed" and entry.get("path"):
            return str(entry["path"])
    if spec.engine in configured:
        for entry in same_name:
            if entry.get("status") == "installed" and entry.get("path"):
                return str(entry["path"])
    if exact:
        entry = exact[0]
        raise NotRunnable(f"waiting for {wanted}: {entry.get('status')}: {entry.get('message')}")
    raise NotRunnable(f"waiting for {wanted}: not installed on this node")


def resolve_gguf(model_path: str) -> Path:
    """A .gguf file, or a directory holding exactly one model in .gguf (or one split model)."""
    path = Path(model_path)
    if path.is_file():
        return path
    if not path.exists():
        raise NotRunnable(f"model_path {model_path} does not exist on this node")
    if not path.is_dir():
        raise NotRunnable(f"model_path {model_path} is neither a file nor a directory", "failed")
    # mmproj-*.gguf is a multimodal projector that rides beside a model, not a model.
    found = sorted(
        p.name
        for p in path.iterdir()
        if p.name.endswith(".gguf") and not p.name.startswith((".", "mmproj")) and p.is_file()
    )
    if not found:
        raise NotRunnable(f"model_path {model_path} holds no .gguf file")
    if len(found) == 1:
        return path / found[0]
    splits = [_SPLIT.match(name) for name in found]
    if all(splits) and len({(m.group("stem"), m.group("count")) for m in splits if m}) == 1:
        first = [name for name, m in zip(found, splits, strict=True) if m and int(m["part"]) == 1]
        if first:
            return path / first[0]
    raise NotRunnable(
        f"model_path {model_path} holds {len(found)} .gguf files ({', '.join(found[:5])}"
        f"{', ...' if len(found) > 5 else ''}): cannot tell which one to load; "
        "keep one model there, or name the file",
        "failed",
    )


def _model_for_python_engines(spec: ShardSpec) -> str:
    if spec.model_path:
        if not Path(spec.model_path).exists():
            raise NotRunnable(f"model_path {spec.model_path} does not exist on this node")
        return spec.model_path
    if spec.source:
        # vLLM and SGLang fetch a Hugging Face repository themselves, by its id.
        return spec.source.removeprefix("hf://")
    raise NotRunnable("neither model_path nor source says where the weights are", "failed")


def _has_option(args: Sequence[str], *names: str) -> bool:
    return any(a in names or a.split("=", 1)[0] in names for a in args)


def _sglang_python(engine_path: str) -> str:
    # agent.yaml names SGLang by its environment's python (or any program in that bin/);
    # SGLang's server is a module of that interpreter.
    path = Path(engine_path)
    if path.name.startswith("python"):
        return engine_path
    for name in ("python3", "python"):
        if (path.parent / name).exists():
            return str(path.parent / name)
    return engine_path


def build_command(spec: ShardSpec, engine_path: str, host: str, port: int) -> Command:
    """The engine's argv (what the agent sets, then the profile's `args`) and environment."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in spec.gpus), **spec.env}
    args = list(spec.args)
    tensor_parallel = str(max(1, len(spec.gpus)))
    if spec.engine == "llama.cpp":
        if not spec.model_path:
            where = f" (source {spec.source})" if spec.source else ""
            raise NotRunnable(f"the weights are not on this node{where}: no model_path")
        gguf = resolve_gguf(spec.model_path)
        argv = [engine_path, "-m", str(gguf), "--host", host, "--port", str(port)]
        if spec.threads is not None:
            argv += ["-t", str(spec.threads)]
        argv += ["--metrics", *args]
    elif spec.engine == "vllm":
        model = _model_for_python_engines(spec)
        argv = [engine_path, "serve", model, "--host", host, "--port", str(port)]
        if not _has_option(args, "--tensor-parallel-size", "-tp"):
            argv += ["--tensor-parallel-size", tensor_parallel]
        argv += args
    elif spec.engine == "sglang":
        model = _model_for_python_engines(spec)
        argv = [_sglang_python(engine_path), "-m", "sglang.launch_server"]
        argv += ["--model-path", model, "--host", host, "--port", str(port)]
        if not _has_option(args, "--tp-size", "--tp", "--tensor-parallel-size"):
            argv += ["--tp-size", tensor_parallel]
        argv += args
    else:
        raise NotRunnable(
            f"engine {spec.engine!r} is not one this agent runs ({', '.join(ENGINES)})", "failed"
        )
    if spec.engine != "llama.cpp" and spec.threads is not None:
        # vLLM and SGLang have no thread flag; their CPU work is OpenMP and torch's pool.
        env.setdefault("OMP_NUM_THREADS", str(spec.threads))
    return Command(tuple(argv), env)


def pick_port(host: str, prefer: int | None = None, taken: Collection[int] = ()) -> int:
    """A port free on `host` now: `prefer` (a restarted shard keeps its URL) if it still is.

    The engine binds it a moment later; another program could take it in between, and the
    engine then exits saying so, which the supervisor treats as any other failure.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for candidate in ([prefer] if prefer else []) + [0] * 20:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # As the engines bind (cpp-httplib, uvicorn): the dead engine's connections in
            # TIME_WAIT must not make its own port look taken.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if port not in taken or port == prefer:
            return port
    raise NotRunnable(f"no free port on {host}", "failed")


WILDCARDS = ("0.0.0.0", "::", "")


def primary_address() -> str:
    """The address this node's traffic leaves from: the source of its default route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            # A UDP connect sends nothing; it only asks the kernel for the route.
            s.connect(("192.0.2.1", 9))
            return str(s.getsockname()[0])
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def advertised_host(serve_host: str, advertise_host: str | None) -> str:
    if advertise_host:
        return advertise_host
    return primary_address() if serve_host in WILDCARDS else serve_host


def local_host(serve_host: str) -> str:
    """Where the agent itself reaches an engine bound to `serve_host` (for /health)."""
    if serve_host == "::":
        return "::1"
    return "127.0.0.1" if serve_host in WILDCARDS else serve_host


def url_for(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
