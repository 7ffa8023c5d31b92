"""Shared fixtures. The suite runs on PostgreSQL and Redis (`make test`
sets DATABASE_URL and REDIS_URL); only tests/test_embedded.py proves the
SQLite default, in a subprocess of its own."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests import tiers
from tests.threads import checked_out_elsewhere, left_after


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "server: starts a server or a subprocess (make check leaves it out)"
    )
    own_redis_db_per_worker()


def own_redis_db_per_worker() -> None:
    """Under pytest-xdist (make test runs its tests on several workers) each
    worker gets a Redis database of its own, as pytest-django gives each its
    own PostgreSQL one: REDIS_URL's number plus the worker's (gw0 keeps it).
    Tests clear the cache and listen on channel groups; on one database a
    worker's cache.clear() would drop another's throttle counts mid-test.
    Django read the settings before this conftest was imported, so every
    setting naming the URL is rewritten, and the environment too, for the
    servers and subprocesses the tests start."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    url = os.environ.get("REDIS_URL", "")
    if not worker.startswith("gw") or urlsplit(url).scheme not in ("redis", "rediss"):
        return
    parts = urlsplit(url)
    number = int(parts.path.strip("/") or 0) + int(worker[2:])
    if number > 15:
        raise pytest.UsageError(f"{worker} would need Redis database {number}: lower REDIS_URL's")
    own = parts._replace(path=f"/{number}").geturl()
    os.environ["REDIS_URL"] = own

    from django.conf import settings

    def rewrite(value: Any) -> Any:
        if value == url:
            return own
        if isinstance(value, dict):
            return {k: rewrite(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        return value

    for name in dir(settings):
        if name.isupper():
            value = getattr(settings, name)
            if (new := rewrite(value)) != value:
                setattr(settings, name, new)
    # A channel layer built at start-up (the console's, in its ready()) holds
    # the old URL: the next get_channel_layer() builds it again from these.
    from channels.layers import channel_layers

    channel_layers.backends.clear()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.mark(items)


@pytest.fixture(autouse=True, scope="session")
def few_rounds_password_hashing() -> Any:
    """Passwords hashed with fewer rounds (tests/hashers.py): the same
    algorithm, checked the same way, at a thousandth of the CPU."""
    from django.test.utils import override_settings

    with override_settings(PASSWORD_HASHERS=["tests.hashers.FewRoundsPBKDF2"]):
        yield


@pytest.fixture(autouse=True)
def no_servers_in_fast_tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """make check (LLMGW_NO_SERVERS=1) fails a test that starts a process or a
    server without being marked so (tests/tiers.py)."""
    if os.environ.get("LLMGW_NO_SERVERS") == "1" and not request.node.get_closest_marker("server"):
        tiers.guard(request.node, monkeypatch)
    yield


@pytest.fixture(autouse=True)
def no_connection_left_behind() -> Any:
    """A test fails when it leaves a pooled connection checked out on some
    other thread. A thread that used the ORM and ended without closing its
    connection never gives it back: browser tests that did so left the
    process's pool of 8 too few for the placement race test after them,
    whose placers then failed waiting for a connection."""
    before = checked_out_elsewhere()
    yield
    # A moment for a thread that is just finishing.
    left = left_after(before, 2)
    assert left <= 0, (
        f"{left} pooled database connection(s) left checked out by other threads: "
        "close the connection at the end of a thread that used the ORM "
        "(tests.threads.in_own_thread does)"
    )


@pytest.fixture(autouse=True)
def cold_placement_fleet() -> Any:
    """Each test starts with no warm fleet (llmgw.serving.warm) and no kept
    engine catalog (llmgw.serving.desired): one kept from a test whose rows
    were rolled back describes nodes and engines that never were."""
    yield
    warm = sys.modules.get("llmgw.serving.warm")
    if warm is not None:
        warm.FLEET.reset()
    desired = sys.modules.get("llmgw.serving.desired")
    if desired is not None:
        desired.CATALOG.clear()


@pytest.fixture
def make_node(db: Any) -> Callable[..., tuple[Any, str]]:
    """Create a node the way an operator does and join it the way an agent
    does; returns (node, credential)."""
    from llmgw.inventory import services
    from llmgw.inventory.models import Node

    def make(name: str = "node-a") -> tuple[Any, str]:
        token = services.add_node(name, "test")
        credential = services.join(name, token)
        return Node.objects.get(name=name), credential

    return make


@pytest.fixture
def agent_client(client: Any) -> Callable[[str], Any]:
    """A Django test client that posts agent payloads with a credential."""

    class AgentClient:
        def __init__(self, credential: str) -> None:
            self.credential = credential

        def post(self, path: str, payload: Any, **extra: Any) -> Any:
            import json

            body = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
            return client.post(
                f"/api/agent/v1/{path}",
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Node {self.credential}",
                **extra,
            )

    return AgentClient


@pytest.fixture
def operator(db: Any) -> Any:
    """A user with the operator role (tests/security/test_roles.py walks
    the others)."""
    from django.contrib.auth.models import User

    from llmgw.accounts import roles

    user = User.objects.create_user("ops", password="a-long-test-password")
    roles.grant(user, roles.OPERATOR)
    return user


@pytest.fixture
def api(operator: Any) -> Any:
    from rest_framework.test import APIClient

    from tests.tokens import make_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {make_token(operator)}")
    return client


@pytest.fixture
def asgi_server(transactional_db: Any) -> Any:
    """The control plane under uvicorn (ASGI: HTTP and WebSockets) on the
    test database, for tests that need a real server process."""
    import os

    from django.conf import settings

    from tests.servers import start_uvicorn

    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }
    with start_uvicorn(env=env) as server:
        yield server.url
