"""The agent's stream: a WebSocket the agent opens to the control plane,
authenticated with its node credential, over which commands go down and
their results come back.

A stream stays bound to the credential it opened with: revoking the node
closes it at once (a message on commit), and every poll and every result
checks the credential again, so a stream that missed the message is deaf
within a second and what it sends meanwhile is dropped.

The poll is one for all of a process's streams (commands.due, one query
a second however many), not one per stream: a fleet of thousands keeps
thousands of streams open, and a query a second each was more load than
all their heartbeats."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Any

import msgspec
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from llmgw_agent.protocol.stream import Command, Result

from llmgw import groups
from llmgw.inventory import commands, node_certificates, services
from llmgw.inventory.api import agent_request

log = logging.getLogger("llmgw.commands")
POLL_S = 1.0
# The close code of a refused or revoked credential (4000 + HTTP 401).
UNAUTHORIZED = 4401
# The close code of a message that is not a readable result (4000 + 400).
UNREADABLE = 4400


class AgentStreamConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # Channels ships no types
    node_id: int | None = None
    # The digest of the credential this stream opened with, or
    # commands.CERT_HELD and the serial of its certificate.
    held: str = ""
    group: str | None = None
    _closed = False
    _poller: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        pem = node_certificates.client_certificate(self.scope)
        opened: tuple[int, str, bool] | None = None
        if pem is not None:
            # A certificate is the node, as on the agent API; such a stream
            # hears of commands at its poll (the wake-up goes to credentials).
            node, held = await database_sync_to_async(node_certificates.authenticate_stream)(pem)
            opened = None if node is None else (node.pk, held, True)
        else:
            credential = agent_request.scope_credential(self.scope)
            if credential is not None:
                # Its key and digest alone: the stream keeps nothing else.
                opened = await database_sync_to_async(services.authenticate_stream)(credential.text)
        if opened is None:
            await self.close(code=UNAUTHORIZED)
            return
        self.node_id, self.held, waiting = opened
        self._lock = asyncio.Lock()
        self.group = commands.group(self.node_id, self.held)
        await groups.join(self.channel_layer, self.group, self.channel_name)
        await self.accept()
        # Commands queued before it opened go at once. Later ones, and one
        # queued between the statement above and the group join, go at the
        # wake-up or at the process's next poll.
        if waiting:
            self._poller = asyncio.create_task(self._deliver())
        _watch().add(self)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # disconnect() runs only on a clean close: a handler that raises (a
        # message that is not JSON) or a channel layer that fails ends the
        # consumer without it, and the poll it started ran on for good.
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._stop_polling()

    async def disconnect(self, code: int) -> None:
        await self._stop_polling()
        if self.group is not None:
            await groups.leave(self.channel_layer, self.group, self.channel_name)

    async def _stop_polling(self) -> None:
        _watch().streams.discard(self)
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    async def agent_command(self, event: dict[str, Any]) -> None:
        await self._deliver()

    async def agent_revoked(self, event: dict[str, Any]) -> None:
        await self._revoked()

    async def _revoked(self) -> None:
        if not self._closed:
            self._closed = True
            await self.close(code=UNAUTHORIZED)

    async def _deliver(self) -> None:
        async with self._lock:
            if self._closed:
                return
            claimed = await database_sync_to_async(commands.claim)(self.node_id, self.held)
            if claimed is None:
                await self._revoked()
                return
            for command in claimed:
                sent = Command(
                    id=command.pk,
                    command=command.kind,
                    args=command.args,
                    timeout_s=command.timeout_s,
                )
                await self.send_json(msgspec.to_builtins(sent))

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        if self._closed:
            return
        # Read as the agent API reads a body (agent_request): a result the
        # strict reader or the protocol refuses (not JSON, a NUL, another
        # message) ends the stream, as it would be a 400 over HTTP. Its
        # output may be a whole fabric's map: the HTTP body limit is not
        # this message's, the WebSocket server's frame limit is.
        body = text_data.encode() if text_data is not None else bytes_data or b""
        result, errors = agent_request.read(body, Result)
        if result is None:
            log.warning("a command stream sent what is not a result, closed: %s", errors)
            self._closed = True
            await self.close(code=UNREADABLE)
            return
        # finish() checks the credential in its UPDATE: a result sent
        # after a revocation is not stored even if it won the race.
        await database_sync_to_async(commands.finish)(self.node_id, result, self.held)


class _Watch:
    """Every stream of one event loop (one web process), polled together."""

    def __init__(self) -> None:
        self.streams: set[AgentStreamConsumer] = set()
        self.task: asyncio.Task[None] | None = None
        self.delivering: set[asyncio.Task[None]] = set()

    def add(self, stream: AgentStreamConsumer) -> None:
        self.streams.add(stream)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while self.streams:
            await asyncio.sleep(POLL_S)
            streams = [s for s in self.streams if not s._closed]
            try:
                gone, pending = await database_sync_to_async(commands.due)(
                    {(s.node_id, s.held) for s in streams}
                )
            except Exception:  # the database is out: poll again next time
                log.exception("polling %d command streams failed", len(streams))
                continue
            for stream in streams:
                if (stream.node_id, stream.held) in gone:
                    await stream._revoked()
                elif stream.node_id in pending:
                    task = asyncio.create_task(stream._deliver())
                    # Held until done: the loop keeps only weak references.
                    self.delivering.add(task)
                    task.add_done_callback(self.delivering.discard)


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()


def _watch() -> _Watch:
    loop = asyncio.get_running_loop()
    watch = _WATCHES.get(loop)
    if watch is None:
        watch = _WATCHES[loop] = _Watch()
    return watch
