"""Through a real web process (uvicorn, its lifespan on): a token it keeps
(llmgw.accounts.token_cache) is refused within a second of being revoked,
its user disabled or its role taken, by any writer; and while its listener
(llmgw.accounts.token_events) is away it keeps nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from django.conf import settings
from django.contrib.auth.models import User

from llmgw.accounts import roles
from llmgw.accounts.models import ApiToken
from llmgw.accounts.token_events import APPLICATION_NAME
from tests.tokens import make_token

NODES = "/api/v1/nodes/?limit=1"


def quietly(sql: str, *params: Any) -> None:
    """`sql` on a connection of its own whose writes fire no trigger
    (session_replication_role): a change no web process hears of, so a
    request it does not refuse was answered from the process's copy."""
    with psycopg.connect(**_params(), autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(sql, params)


def _params() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    return {"dbname": db["NAME"], "user": db["USER"], "host": db["HOST"], "port": db["PORT"]}


def listeners() -> list[int]:
    """The backends of the web process's credential listener."""
    with psycopg.connect(**_params(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
            (APPLICATION_NAME, settings.DATABASES["default"]["NAME"]),
        ).fetchall()
    return [pid for (pid,) in rows]


def wait_for(check: Callable[[], Any], seconds: float = 10) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.02)
    raise AssertionError(f"not within {seconds} s")


def refused_within(client: httpx.Client, send: Callable[[], Any], cut: float) -> float:
    """Seconds from `cut` until `send()` is answered 401 or 403."""
    while time.monotonic() - cut < 5:
        if send().status_code in (401, 403):
            return time.monotonic() - cut
        time.sleep(0.01)
    raise AssertionError("still accepted 5 s after the cut")


def kept(client: httpx.Client, user: User) -> None:
    """Proves the process answers `user`'s token from its copy: disabled
    where no web process hears of it, the token is still let in. Tried a
    few times: a listener just connected is trusted after its first round
    trip, a moment after its connection shows."""
    for _ in range(5):
        assert client.get(NODES).status_code == 200
        quietly("UPDATE auth_user SET is_active = false WHERE id = %s", user.pk)
        try:
            if client.get(NODES).status_code == 200:
                return
        finally:
            quietly("UPDATE auth_user SET is_active = true WHERE id = %s", user.pk)
        time.sleep(0.2)
    raise AssertionError("never answered from the copy")


@pytest.fixture
def web(asgi_server: str) -> str:
    wait_for(listeners)
    return asgi_server


def client_of(url: str, user: User) -> httpx.Client:
    return httpx.Client(
        base_url=url, headers={"Authorization": f"Token {make_token(user)}"}, timeout=10
    )


@pytest.mark.parametrize("how", ["delete token", "disable user", "take role"])
def test_a_kept_token_is_refused_within_1_s_of_its_cut(web, operator, how):
    with client_of(web, operator) as client:
        kept(client, operator)
        cut = time.monotonic()
        if how == "delete token":
            ApiToken.objects.filter(user=operator).delete()
        elif how == "disable user":
            # An update() sends no signal: the database's notice is what is heard.
            User.objects.filter(pk=operator.pk).update(is_active=False)
        else:
            roles.grant(operator, None)
        delay = refused_within(client, lambda: client.get(NODES), cut)
    assert delay < 1.0, f"{how}: refused {delay:.2f} s after the cut"


def test_a_demoted_operator_may_not_place_within_1_s(web, operator):
    with client_of(web, operator) as client:
        kept(client, operator)

        def place() -> Any:
            return client.post("/api/v1/models/nosuch/place")

        assert place().status_code not in (401, 403)
        cut = time.monotonic()
        roles.grant(operator, roles.VIEWER)
        delay = refused_within(client, place, cut)
        assert delay < 1.0, f"placed {delay:.2f} s after the demotion"
        assert client.get(NODES).status_code == 200  # a viewer still reads


def test_a_lost_listener_keeps_nothing_and_listens_again(web, operator):
    with client_of(web, operator) as client:
        kept(client, operator)
        (pid,) = listeners()
        quietly("SELECT pg_terminate_backend(%s)", pid)
        # Unheard by anyone, and still refused at once: the copy went with
        # the listener's connection.
        cut = time.monotonic()
        quietly("UPDATE auth_user SET is_active = false WHERE id = %s", operator.pk)
        delay = refused_within(client, lambda: client.get(NODES), cut)
        assert delay < 1.0, f"refused {delay:.2f} s after the cut"
        quietly("UPDATE auth_user SET is_active = true WHERE id = %s", operator.pk)
        # It listens again, on a new connection, and keeps tokens again.
        wait_for(lambda: listeners() and listeners() != [pid])
        wait_for(lambda: client.get(NODES).status_code == 200)
        kept(client, operator)
