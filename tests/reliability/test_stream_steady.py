"""A command stream with nothing to say stays open.

redis-py 8 gives every connection a 5 s socket timeout by default, while
channels-redis waits on a blocking pop for the next message: every idle
consumer's receive raised "Timeout reading from ..." about every 5 s, the
socket was torn down and the agent reconnected, over and over, with map
sweeps lost in the gaps. The channel layer's connections now wait longer
than the blocking pop does."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from llmgw_agent.stream import stream_url
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_idle_stream_stays_open_past_the_redis_socket_timeout(
    asgi_server: str, make_node
) -> None:
    assert "RedisChannelLayer" in settings.CHANNEL_LAYERS["default"]["BACKEND"]
    _, credential = make_node("quiet")
    headers = {"Authorization": f"Node {credential}"}
    with connect(stream_url(asgi_server), additional_headers=headers, open_timeout=10) as ws:
        deadline = time.monotonic() + 14
        while time.monotonic() < deadline:
            try:
                message = ws.recv(timeout=1)
            except TimeoutError:
                continue
            except ConnectionClosed as closed:
                raise AssertionError(f"the idle stream was closed: {closed!r}") from None
            assert message, "the stream sent an empty message"
        ws.ping().wait(5)
