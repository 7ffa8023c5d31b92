"""Real servers and a real browser, for the tests and the benchmarks alike.

A server is a subprocess listening on a port picked free just before it
starts, waited for until it answers and stopped with SIGTERM (SIGKILL when
it lingers); `ServerThread` is an ASGI app under uvicorn in this process.
The browser is Debian's Chromium under Playwright, never `playwright
install`'s. Nothing here imports Django or pytest: bench/ scripts import it
too, with the checkout's root on sys.path.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    """A port nothing listens on now; the server started next binds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout: float = 10) -> None:
        self.proc.terminate()
        try:
            # uvicorn waits for open connections to close; on a loaded machine a
            # socket the caller left open can hold it past this.
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def answers_200(url: str) -> Callable[[], bool]:
    """A readiness check: `url` answers 200 (llama-server's /health once loaded)."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    return check


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def start_server(
    argv: Sequence[str],
    port: int,
    *,
    ready: Callable[[], bool] | None = None,
    seconds: float = 30,
    **popen: Any,
) -> Server:
    """Run `argv`, which listens on `port`, and return once it answers: once
    `ready` says so, or else once it accepts a connection. Raises
    RuntimeError when it exits first or does not answer within `seconds`."""
    server = Server(subprocess.Popen(list(argv), **popen), port)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited with {server.proc.returncode}")
        if ready() if ready is not None else _accepts(port):
            return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"{argv[0]} did not answer on port {port} within {seconds:g} s")


def start_uvicorn(
    app: str = "llmgw.asgi:application",
    *,
    options: Sequence[str] = (),
    seconds: float = 30,
    **popen: Any,
) -> Server:
    """`app` under uvicorn on 127.0.0.1, from the checkout's root."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--log-level", "warning", *options]
    return start_server(argv, port, seconds=seconds, cwd=popen.pop("cwd", ROOT), **popen)


@contextmanager
def chromium() -> Iterator[Any]:
    """Chromium, headless, under Playwright's sync API (which keeps an event
    loop on this thread while it runs)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class ServerThread:
    """An ASGI app under uvicorn on 127.0.0.1, in a thread with its own loop."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            await self.server.serve(sockets=[self.sock])

        asyncio.run(main())

    def start(self) -> ServerThread:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            self.thread.join(0.01)
        raise RuntimeError("uvicorn did not start")

    def call(self, coro: Any, timeout: float = 30) -> Any:
        """Run a coroutine on the server's loop and wait for its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
