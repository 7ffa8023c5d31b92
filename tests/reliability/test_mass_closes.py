"""Thousands of agent streams closing at once leave their groups within the
channel layer's Redis pool.

When the simulator's 5,000 streams closed together, about 2,000 of their
group leaves failed with MaxConnectionsError (more leaves at once than the
pool's connections) and those channels stayed in their groups until
expiry. Here the pool is made small (10 connections) and 150 real streams,
on the real Redis channel layer, close in the same instant: no leave may
fail and no channel may stay in a group. With the bound taken away
(CHANNEL_GROUP_OPS as large as the streams) the same closes run the pool
dry, which the second test shows, so the first one can fail."""

from __future__ import annotations

import asyncio
import copy
import logging

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.layers import channel_layers, get_channel_layer

from llmgw import groups
from llmgw.inventory import commands
from llmgw.inventory.consumers import AgentStreamConsumer
from llmgw.inventory.models import Node

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 150
POOL = 10


@pytest.fixture
def small_pool(settings):
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    layers["default"]["CONFIG"]["hosts"][0]["max_connections"] = POOL
    settings.CHANNEL_LAYERS = layers
    channel_layers.backends.clear()
    yield settings
    channel_layers.backends.clear()


async def opened(credential: str) -> ApplicationCommunicator:
    scope = {
        "type": "websocket",
        "path": "/api/agent/v1/stream",
        "headers": [(b"authorization", f"Node {credential}".encode())],
        "subprotocols": [],
    }
    app = ApplicationCommunicator(AgentStreamConsumer.as_asgi(), scope)
    await app.send_input({"type": "websocket.connect"})
    assert (await app.receive_output(30))["type"] == "websocket.accept"
    return app


async def close_all(apps: list[ApplicationCommunicator], monkeypatch) -> None:
    """Every stream closed at once, waited for until each has left its
    group (or logged that it could not), which is all these tests read.
    Not until each consumer has ended: the one holding the channel layer's
    shared receive can sit in its cancelled BZPOPMIN, and wait(60) gave up
    on it silently a minute later, most of what each test took."""
    left = 0
    leave = groups.leave

    async def counted(*args: object) -> None:
        nonlocal left
        try:
            await leave(*args)
        finally:
            left += 1

    monkeypatch.setattr(groups, "leave", counted)
    for app in apps:
        await app.send_input({"type": "websocket.disconnect", "code": 1000})
    async with asyncio.timeout(60):
        while left < len(apps):
            await asyncio.sleep(0.05)
    await asyncio.gather(*(app.wait(1) for app in apps))


def members(nodes: list[Node]) -> int:
    """Channels still in the nodes' groups, read from Redis itself."""

    async def count() -> int:
        layer = get_channel_layer()
        connection = layer.connection(0)
        total = 0
        for node in nodes:
            key = layer._group_key(commands.group(node.pk, node.credential_hash))
            total += await connection.zcard(key)
        return total

    return asyncio.run(count())


def open_and_close_all(credentials: list[str], monkeypatch) -> None:
    async def main() -> None:
        # Opened a few at a time, well within the pool even unbounded (the
        # stream's own receive holds a connection too), closed all at once.
        apps = []
        for start in range(0, len(credentials), 4):
            apps += await asyncio.gather(*(opened(c) for c in credentials[start : start + 4]))
        await close_all(apps, monkeypatch)

    asyncio.run(main())


def fleet(make_node) -> tuple[list[Node], list[str]]:
    made = [make_node(f"mass-{i:03d}") for i in range(STREAMS // 3)]
    nodes = [Node.objects.get(pk=node.pk) for node, _ in made]
    # Three streams a node, as reconnects overlap: more closes than nodes.
    return nodes, [credential for _, credential in made for _ in range(3)]


def test_streams_closing_at_once_all_leave_their_groups(make_node, small_pool, caplog, monkeypatch):
    small_pool.CHANNEL_GROUP_OPS = 4
    nodes, credentials = fleet(make_node)
    with caplog.at_level(logging.WARNING, logger="llmgw.channels"):
        open_and_close_all(credentials, monkeypatch)
    assert not [r for r in caplog.records if r.name == "llmgw.channels"]
    assert members(nodes) == 0


def test_unbounded_leaves_run_the_small_pool_dry(make_node, small_pool, caplog, monkeypatch):
    # The same closes with no bound and no retry: the pool's limit is real.
    small_pool.CHANNEL_GROUP_OPS = STREAMS
    monkeypatch.setattr(groups, "RETRY_S", ())
    nodes, credentials = fleet(make_node)
    with caplog.at_level(logging.WARNING, logger="llmgw.channels"):
        open_and_close_all(credentials, monkeypatch)
    failed = [r for r in caplog.records if r.name == "llmgw.channels"]
    # Most leaves failed for want of a connection, and each left its channel behind.
    assert len(failed) > STREAMS // 2, len(failed)
    assert "Too many connections" in failed[0].getMessage()
    assert members(nodes) == len(failed)
