"""Agents reopening their streams all at once, on the channel layer as
configured (real Redis): after a restart every agent of a web process
joins its group within seconds."""

from __future__ import annotations

import asyncio

from channels.layers import get_channel_layer

JOINING = 600


def test_hundreds_of_streams_joining_at_once_all_join():
    # redis-py 8 caps a pool at 100 connections and fails the 101st at
    # once ("Too many connections"): hundreds of agents of a restarted
    # process could not reopen their streams.
    async def storm() -> list[BaseException | None]:
        layer = get_channel_layer()
        names = [await layer.new_channel() for _ in range(JOINING)]
        try:
            return await asyncio.gather(
                *(layer.group_add(f"storm-{i}", n) for i, n in enumerate(names)),
                return_exceptions=True,
            )
        finally:
            await asyncio.gather(
                *(layer.group_discard(f"storm-{i}", n) for i, n in enumerate(names)),
                return_exceptions=True,
            )

    failed = [r for r in asyncio.run(storm()) if r is not None]
    assert not failed, f"{len(failed)} of {JOINING} failed to join, first: {failed[0]!r}"
