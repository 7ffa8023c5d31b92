"""/ws/console: pushes "fabric changed", "node changed", "nvlink changed",
"models changed" and "facility changed" to logged-in pages. An event names what changed, never carries the data:
the page refetches through the same API it polls, so it never shows
something the API would not, and no event can leak what a page may not see."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from llmgw import groups
from llmgw.accounts import roles
from llmgw.console.events import GROUP


class ConsoleConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # Channels ships no types
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await database_sync_to_async(roles.is_viewer)(user):
            await self.close(code=4403)
            return
        await groups.join(self.channel_layer, GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await groups.leave(self.channel_layer, GROUP, self.channel_name)

    async def console_event(self, event: dict[str, Any]) -> None:
        await self.send_json({k: v for k, v in event.items() if k != "type"})
