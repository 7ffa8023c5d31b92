"""While the database cannot be reached the API says so: 503 with
Retry-After and a JSON body, never a 500, and the agent API the same (the
agents back off and fail over on it)."""

from __future__ import annotations

import os

import httpx

from tests.servers import start_uvicorn


def test_an_unreachable_database_is_a_503_with_retry_after() -> None:
    env = {
        **os.environ,
        # Nothing listens on port 1: every connection is refused at once.
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/llmgw",
        "LLMGW_DB_POOL_TIMEOUT_S": "1",
    }
    with start_uvicorn(env=env) as server:
        for method, path, body in (
            ("GET", "/api/v1/nodes/", None),
            ("POST", "/api/agent/v1/heartbeat", {"schema": 1, "node": "n", "memory": {}}),
            ("POST", "/api/v1/token", {"username": "a", "password": "b"}),
        ):
            # Well-formed credentials: only the database can say they are wrong.
            headers = {"Authorization": "Token x" if "agent" not in path else "Node n.secret"}
            r = httpx.request(method, server.url + path, json=body, headers=headers, timeout=30)
            assert r.status_code == 503, (path, r.status_code, r.text[:300])
            assert r.headers["Retry-After"] == "5", path
            assert "database cannot be reached" in r.json()["detail"], path
