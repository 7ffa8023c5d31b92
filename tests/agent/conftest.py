"""Agent tests: no Django, no database. Real files under fixtures/, a real HTTP server."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def real_tmp(tmp_path: Path) -> Path:
    # Mount points are matched against realpath; /tmp may itself be a link.
    return Path(os.path.realpath(tmp_path))


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ControlPlane:
    """A real HTTP server on 127.0.0.1. `script[path]` is consumed one step per request:
    "drop" closes the connection unanswered, an int answers that status, a dict answers
    200 with it; once a path's script is used up it answers `default`."""

    script: dict[str, list[Any]] = field(default_factory=dict)
    default: dict[str, Any] = field(default_factory=lambda: {"state": "Ready", "register": False})
    received: list[Received] = field(default_factory=list)
    url: str = ""

    def ok(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]


@pytest.fixture
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            with lock:
                steps = plane.script.get(self.path, [])
                step = steps.pop(0) if steps else plane.default
            if step == "drop":
                self.close_connection = True
                return
            if isinstance(step, int):
                self.send_response(step)
                self.end_headers()
                return
            with lock:
                plane.received.append(Received(self.path, dict(self.headers), body))
            answer = dict(step)
            answer.setdefault("node", body.get("node"))
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    plane.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield plane
    finally:
        server.shutdown()
        server.server_close()


# The real llama-server and a tiny real model, shared by the engine and
# shard tests (built once per session).
@pytest.fixture(scope="session")
def llama_server() -> Path:
    from tests.agent.engine_helpers import build_llama_server

    return build_llama_server()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.serving_models import make_tiny_gguf

    folder = tmp_path_factory.mktemp("models") / "tiny"
    folder.mkdir()
    make_tiny_gguf(folder / "tiny.gguf")
    return folder


@pytest.fixture
def engines(llama_server: Path) -> list[dict[str, Any]]:
    """The engine manager's report with llama.cpp b11434 installed."""
    from tests.agent.engine_helpers import TAG

    return [
        {"name": "llama.cpp", "version": TAG, "status": "installed",
         "message": "llama-server version 0.6.0-dev", "path": str(llama_server)}
    ]  # fmt: skip
