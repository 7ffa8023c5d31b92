"""/ws/console carries the session cookie a browser sends with any page's
request: without an Origin check, a page on another site that a logged-in
operator opens could subscribe to the fleet's events (cross-site WebSocket
hijacking)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect


def session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def test_the_console_stream_refuses_a_foreign_origin(asgi_server: str, operator: Any) -> None:
    ws = asgi_server.replace("http://", "ws://") + "/ws/console"
    headers = {"Cookie": session_cookie(operator)}
    with pytest.raises(InvalidStatus) as refused:
        connect(ws, origin="http://evil.example", additional_headers=headers, open_timeout=10)
    assert refused.value.response.status_code == 403


def test_the_console_stream_accepts_its_own_origin(asgi_server: str, operator: Any) -> None:
    ws = asgi_server.replace("http://", "ws://") + "/ws/console"
    headers = {"Cookie": session_cookie(operator)}
    with connect(ws, origin=asgi_server, additional_headers=headers, open_timeout=10) as sock:
        sock.ping().wait(5)
