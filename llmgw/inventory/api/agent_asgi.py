"""POST /api/agent/v1/join and /register before Django, as the heartbeat is
(heartbeat_asgi).

A fleet starting at once joins and registers every node within a minute.
Through Django each of these cost twice what the join or the registration
itself does: a new thread per request, the middleware, URL resolution and
DRF's dispatch. Here the body is read straight from ASGI by the reader
JoinView and RegisterView use (agent_request), and the same service is called in a thread of a small
pool of this process's, entered through sync_to_async as a request is.

Only the plain case is served here. Everything else (a client certificate,
no or a malformed credential, a body over the agent limit, one the strict
reader or the protocol refuses, another node's name, a credential that
authenticates nobody) is handed to Django, body and all, before anything is
written, where the views answer exactly as they always have: 401, 413, 400
naming every bad field, 403 with its audit record. A join refused by the
service (the token unknown, used or expired) is answered here as JoinView
answers it, since the service has already recorded the refusal.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import msgspec
from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection
from llmgw_agent.protocol.messages import Joined

from llmgw.inventory import credentials, services

Scope = dict[str, Any]
T = TypeVar("T")

JOIN = "/api/agent/v1/join"
REGISTER = "/api/agent/v1/register"
# Joins and registrations served at once by one web process; more wait
# their turn here rather than each holding a thread and a connection.
THREADS = 4

_threads: ThreadPoolExecutor | None = None


async def run(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in this process's agent threads, bracketed as Django
    brackets a request: its connection comes from the pool and goes back."""
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(THREADS, thread_name_prefix="llmgw-agent")

    def bracketed() -> T:
        close_old_connections()
        try:
            return work(*args)
        finally:
            connection.close()

    return await sync_to_async(bracketed, thread_sensitive=False, executor=_threads)()


def peer_address(scope: Scope) -> str | None:
    """As agent_views.peer_address reads REMOTE_ADDR, which Django takes
    from the scope's client (after uvicorn's trusted proxy headers)."""
    client = scope.get("client") or ("",)
    try:
        return str(ipaddress.ip_address(client[0] or ""))
    except ValueError:
        return None


def join(data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """JoinView's answer: the credential, or the refusal the service recorded."""
    try:
        credential = services.join(data["node"], data["token"])
    except services.InventoryError as exc:
        return 403, {"errors": {"token": [str(exc)]}}
    return 200, msgspec.to_builtins(Joined(node=data["node"], credential=credential))


def register(credential: str, data: dict[str, Any], address: str | None) -> dict[str, Any] | None:
    """RegisterView's answer; None, having written nothing, when the
    credential authenticates no node (Django answers that 401)."""
    parts = credentials.split_credential(credential)
    if parts is None or parts[0] != data["node"]:
        return None  # another node's name: Django refuses it, recorded
    node = services.register_by_credential(credential, data, address)
    if node is None:
        return None
    return {"node": node.name, "state": services.effective_state(node)}
