"""The agent's command stream: a WebSocket the agent opens to the control
plane, so commands reach the node within a second and nothing ever connects
into the node (no SSH, no listening port).

Each command runs through a handler of this registry, in a worker thread so
a long ibnetdiscover does not hold up the next command; its output goes
back on the same socket. The connection is re-opened with backoff forever,
each time to the URL the agent's client is using then: the web process that
last answered a heartbeat.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect

from . import perftest
from .client import Backoff
from .collectors.registry import Roots
from .protocol.stream import Command, Result

log = logging.getLogger("llmgw_agent.stream")
# The stream's headers, and its TLS context (None: the default).
Identity = tuple[dict[str, str], ssl.SSLContext | None]
STREAM = "/api/agent/v1/stream"

Handler = Callable[[Roots, Mapping[str, Any]], str]
COMMANDS: dict[str, Handler] = {}


def command(name: str) -> Callable[[Handler], Handler]:
    def register(func: Handler) -> Handler:
        COMMANDS[name] = func
        return func

    return register


@command("ping")
def ping(roots: Roots, args: Mapping[str, Any]) -> str:
    return "pong"


@command("ibnetdiscover")
def ibnetdiscover(roots: Roots, args: Mapping[str, Any]) -> str:
    """The fabric map, as text: the control plane parses it itself, so a
    format the parser has not met is a control-plane upgrade, not one on
    every node."""
    argv = ["ibnetdiscover"]
    if args.get("ports"):
        argv.append("-p")
    if args.get("device"):
        argv += ["-C", str(args["device"])]
    if args.get("port"):
        argv += ["-P", str(args["port"])]
    done = roots.run(argv)
    if done.returncode != 0:
        raise RuntimeError(f"ibnetdiscover exited {done.returncode}: {done.stderr.strip()[:2000]}")
    return done.stdout


# The fabric test's requests (llmgw_agent.protocol.perftest): answered here, so
# every agent that has them lists them in its registration's features.
COMMANDS.update(perftest.HANDLERS)


def stream_url(server_url: str) -> str:
    base = server_url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :] + STREAM
    if base.startswith("http://"):
        return "ws://" + base[len("http://") :] + STREAM
    raise ValueError(f"server_url {server_url!r}: expected http:// or https://")


def features() -> list[str]:
    return [f"command:{name}" for name in sorted(COMMANDS)]


class Stream:
    def __init__(
        self,
        server_url: str | Callable[[], str],
        credential: Callable[[], str | None],
        roots: Roots,
        stop: threading.Event,
        commands: Mapping[str, Handler] | None = None,
        identity: Callable[[], Identity | None] | None = None,
    ) -> None:
        if isinstance(server_url, str):
            stream_url(server_url)  # a bad URL fails here, not in the thread

            def fixed() -> str:
                return server_url

            self.server_url: Callable[[], str] = fixed
        else:
            self.server_url = server_url
        # The registry above; `llmgw simulate` answers for made-up nodes with its own.
        self.commands = COMMANDS if commands is None else commands
        self.credential = credential
        # How to prove the node (AgentClient.stream_identity): its headers and the TLS
        # context, which carries the node's certificate under mTLS and trusts ca_file.
        self.identity = identity
        self.roots = roots
        self.stop = stop
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="command")
        self.send_lock = threading.Lock()

    def run_forever(self) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            proof = self._proof()
            if proof is None:
                self.stop.wait(5.0)
                continue
            headers, context = proof
            url = stream_url(self.server_url())
            try:
                with connect(
                    url,
                    additional_headers=headers,
                    open_timeout=10,
                    close_timeout=2,
                    ssl=context if url.startswith("wss:") else None,
                ) as ws:
                    log.info("command stream open to %s", url)
                    backoff.reset()
                    self._serve(ws)
            except (OSError, WebSocketException, TimeoutError) as exc:
                delay = backoff.next()
                log.warning(
                    "command stream to %s closed (%s); reopening in %.1f s", url, exc, delay
                )
                self.stop.wait(delay)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _proof(self) -> Identity | None:
        if self.identity is not None:
            return self.identity()
        credential = self.credential()
        return None if credential is None else ({"Authorization": f"Node {credential}"}, None)

    def _serve(self, ws: ClientConnection) -> None:
        while not self.stop.is_set():
            try:
                raw = ws.recv(timeout=1.0)
            except TimeoutError:
                continue
            try:
                command = _read(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                log.warning("ignoring a message on the command stream: %s", exc)
                continue
            self.pool.submit(self._run, ws, command)

    def _run(self, ws: ClientConnection, command: Command) -> None:
        handler = self.commands.get(command.command)
        if handler is None:
            result = Result(
                id=command.id, ok=False, error=f"this agent does not answer {command.command!r}"
            )
        else:
            try:
                output = handler(self.roots, command.args or {})
                result = Result(id=command.id, ok=True, output=output)
            except Exception as exc:  # a failed command is reported, never fatal
                result = Result(id=command.id, ok=False, error=f"{type(exc).__name__}: {exc}")
        log.info(
            "command %s #%s: %s", command.command, command.id, "ok" if result.ok else result.error
        )
        try:
            with self.send_lock:
                ws.send(msgspec.json.encode(result).decode())
        except (OSError, WebSocketException) as exc:
            log.warning("could not send the result of command #%s: %s", command.id, exc)


def _read(raw: str | bytes) -> Command:
    return msgspec.json.decode(raw, type=Command)
