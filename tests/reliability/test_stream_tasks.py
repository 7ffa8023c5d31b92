"""Every task a stream starts ends with its stream.

Each agent stream polls the database once a second for queued commands.
A stream that ended any way but a clean close (a handler raising on a
message it could not read, the channel layer failing) left its poll
running for good: after 25 minutes of reconnects an idle web process ran
236 leaked polls, ~239 transactions/s. These streams run in this process,
on the real Redis channel layer, and the test counts the polls left."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from asgiref.testing import ApplicationCommunicator

from llmgw.inventory.consumers import AgentStreamConsumer

pytestmark = pytest.mark.django_db(transaction=True)


def polls() -> int:
    return sum(
        1
        for t in asyncio.all_tasks()
        if not t.done() and t.get_coro().__qualname__ == "AgentStreamConsumer._poll"
    )


async def one_stream(credential: str, ending: str) -> None:
    scope = {
        "type": "websocket",
        "path": "/api/agent/v1/stream",
        "headers": [(b"authorization", f"Node {credential}".encode())],
        "subprotocols": [],
    }
    app = ApplicationCommunicator(AgentStreamConsumer.as_asgi(), scope)
    await app.send_input({"type": "websocket.connect"})
    assert (await app.receive_output(10))["type"] == "websocket.accept"
    if ending == "close":
        await app.send_input({"type": "websocket.disconnect", "code": 1000})
        await app.wait(10)
    elif ending == "unreadable message":
        # Not JSON: the consumer closes the stream (4400), and the server
        # then tells it the socket is gone.
        await app.send_input({"type": "websocket.receive", "text": "{not json"})
        closed = await app.receive_output(10)
        assert closed == {"type": "websocket.close", "code": 4400}, closed
        await app.send_input({"type": "websocket.disconnect", "code": 4400})
        await app.wait(10)
    else:
        # The server drops the consumer without a disconnect (a handler
        # that raised, a channel layer that failed): its disconnect handler
        # never runs.
        app.future.cancel()
        with contextlib.suppress(BaseException):
            await app.wait(10)


@pytest.mark.parametrize("ending", ["close", "unreadable message", "dropped"])
def test_no_poll_outlives_its_stream_after_100_reconnects(make_node, ending: str) -> None:
    _, credential = make_node("flappy")

    async def main() -> int:
        # A dropped consumer takes most of a second to unwind its executor
        # threads; ten of them prove the point.
        for _ in range(10 if ending == "dropped" else 100):
            await one_stream(credential, ending)
        await asyncio.sleep(0.1)
        return polls()

    assert asyncio.run(main()) == 0
