"""The agent's stream: a WebSocket the agent opens to the control plane,
authenticated with its node credential, over which commands go down and
their results come back."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from llmgw.inventory import commands, services

POLL_S = 1.0


class AgentStreamConsumer(AsyncJsonWebsocketConsumer):
    node_id: int | None = None
    _poller: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        headers = dict(self.scope.get("headers") or [])
        scheme, _, credential = (
            headers.get(b"authorization", b"").decode(errors="replace").partition(" ")
        )
        node = (
            await database_sync_to_async(services.authenticate)(credential)
            if scheme == "Node"
            else None
        )
        if node is None:
            await self.close(code=4401)
            return
        self.node_id = node.pk
        self._lock = asyncio.Lock()
        await self.channel_layer.group_add(commands.group(node.pk), self.channel_name)
        await self.accept()
        self._poller = asyncio.create_task(self._poll())

    async def disconnect(self, code: int) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self.node_id is not None:
            await self.channel_layer.group_discard(commands.group(self.node_id), self.channel_name)

    async def _poll(self) -> None:
        while True:
            await self._deliver()
            await asyncio.sleep(POLL_S)

    async def agent_command(self, event: dict[str, Any]) -> None:
        await self._deliver()

    async def _deliver(self) -> None:
        async with self._lock:
            for command in await database_sync_to_async(commands.claim)(self.node_id):
                await self.send_json(
                    {
                        "type": "command",
                        "id": command.pk,
                        "command": command.kind,
                        "args": command.args,
                        "timeout_s": command.timeout_s,
                    }
                )

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "result":
            await database_sync_to_async(commands.finish)(self.node_id, content)
