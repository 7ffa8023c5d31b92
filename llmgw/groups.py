"""Joining and leaving channel-layer groups, a bounded number at once.

channels-redis takes a pooled Redis connection for each group operation.
When thousands of agent streams close at once (a simulator stopped, a
network blip, a web process draining) every one leaves its group in the
same instant: 5,000 closes on pools of 2,000 connections failed about
2,000 of them with MaxConnectionsError, and those channels stayed in their
groups until the groups expired, each a member that every wake-up for
that node was sent to. Here the operations of one process wait for their
turn instead (CHANNEL_GROUP_OPS, well under the pool), and a leave that
fails all the same is tried again before it is given up and logged.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from django.conf import settings

log = logging.getLogger("llmgw.channels")

# A leave that failed (the pool or Redis busy for a moment) is tried again
# after these pauses; then it is logged and left to the group's expiry.
RETRY_S = (0.1, 0.5, 2.0)

_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _turn() -> asyncio.Semaphore:
    # One per event loop: a semaphore belongs to the loop it was made on.
    loop = asyncio.get_running_loop()
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = asyncio.Semaphore(settings.CHANNEL_GROUP_OPS)
    return turn


async def join(layer: Any, group: str, channel: str) -> None:
    async with _turn():
        await layer.group_add(group, channel)


async def leave(layer: Any, group: str, channel: str) -> None:
    for pause in (*RETRY_S, None):
        try:
            async with _turn():
                await layer.group_discard(group, channel)
            return
        except Exception as failed:  # noqa: BLE001 - any failure of the layer: try again, then log
            if pause is None:
                log.warning(
                    "channel %s left in group %s until it expires: %s", channel, group, failed
                )
                return
            await asyncio.sleep(pause)
