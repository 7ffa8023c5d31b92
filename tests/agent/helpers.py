"""Helpers shared by the agent tests (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from llmgw_agent.collectors import Roots

from tests.servers import free_port

FIXTURES = Path(__file__).parent / "fixtures"
HOST = FIXTURES / "host"


@dataclass
class FakeStatfs:
    f_bavail: int
    f_blocks: int
    f_frsize: int = 4096


def host_roots(**kw: Any) -> Roots:
    """Roots over the recorded host tree; no waiting for a second CPU sample."""
    kw.setdefault("cpu_first_sample_s", 0)
    return Roots(proc=HOST / "proc", sys=HOST / "sys", rootfs=HOST / "root", **kw)


def write_mountinfo(path: Path, mounts: list[tuple[str, str, str, str]]) -> Path:
    """mounts: (major:minor, mountpoint, fstype, source), in mountinfo's own format."""
    lines = ["1 0 254:0 / / rw,relatime - ext4 /dev/vda rw"]
    for i, (dev, point, fstype, source) in enumerate(mounts, start=2):
        point = point.replace(" ", "\\040")
        lines.append(f"{i} 1 {dev} / {point} rw,relatime shared:{i} - {fstype} {source} rw")
    path.write_text("\n".join(lines) + "\n")
    return path


class StandIn:
    """A control plane stand-in on 127.0.0.1 that can be stopped and started again on the
    same port, as a web process restarts. Every POST is answered `answer_for(path)`: 200
    with what a healthy control plane says to a heartbeat, or that status and no body.
    `seen` records (monotonic time, path, status) for every request answered."""

    def __init__(self, status: int = 200) -> None:
        self.port = free_port()  # free now; bound again on start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.status = status
        self.seen: list[tuple[float, str, int]] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def answer_for(self, path: str) -> int:
        return self.status

    def posts(self, path: str, status: int | None = None) -> list[float]:
        with self.lock:
            return [t for t, p, s in self.seen if p == path and status in (None, s)]

    def start(self) -> StandIn:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the command stream's upgrade
                self.send_response(503)
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with stand_in.lock:
                    status = stand_in.answer_for(self.path)
                    # Before answering: the client may look as soon as it has the answer.
                    stand_in.seen.append((time.monotonic(), self.path, status))
                data = b""
                if status == 200:
                    answer = {"state": "Ready", "register": False, "node": body.get("node")}
                    data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Sockets bound and never listening, held for the rest of the run.
_held: list[socket.socket] = []


def dead_url() -> str:
    """A URL where nothing listens, and nothing will: the port is bound by a
    socket that never listens, so a connection is refused. A port that was
    merely free a moment ago was taken by another worker's server in a
    parallel run, and the agent heard an answer from the "dead" URL."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    _held.append(held)
    return f"http://127.0.0.1:{held.getsockname()[1]}"
