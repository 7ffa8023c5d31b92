"""Under uvicorn every request runs its sync part on a thread of its own,
and a persistent connection (CONN_MAX_AGE) belongs to the thread that
opened it: with CONN_MAX_AGE > 0 each request left a connection behind,
idle and never closed, until PostgreSQL ran out of them. A web process
now holds a bounded pool, however many requests it has served."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from django.conf import settings
from django.db import connection


def server_connections() -> int:
    name = settings.DATABASES["default"]["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
        return int(cursor.fetchone()[0])


def test_a_web_process_keeps_a_bounded_number_of_connections(asgi_server: str) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    browser = Client()
    browser.force_login(User.objects.create_superuser("root", password="a-long-test-password"))
    cookie = {"sessionid": browser.cookies["sessionid"].value}
    # This process's own pool holds connections too: count the server's growth.
    before = server_connections()
    # Concurrent, as browsers, agents and scripts are: uvicorn then runs
    # each request's sync part on a thread of its own.
    with httpx.Client(base_url=asgi_server, cookies=cookie) as client:
        with ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(lambda _: client.get("/api/v1/nodes/").status_code, range(60)))
    assert codes == [200] * 60
    grown = server_connections() - before
    assert grown <= settings.DATABASE_POOL_MAX, f"{grown} more connections after 60 requests"
