"""While the database cannot be reached the API says so: 503 with
Retry-After and a JSON body, never a 500, and the agent API the same (the
agents back off and fail over on it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx


def test_an_unreachable_database_is_a_503_with_retry_after() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        # Nothing listens on port 1: every connection is refused at once.
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/llmgw",
        "LLMGW_DB_POOL_TIMEOUT_S": "1",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "llmgw.asgi:application", "--port", str(port),
         "--log-level", "warning"],
        env=env,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
        for method, path, body in (
            ("GET", "/api/v1/nodes/", None),
            ("POST", "/api/agent/v1/heartbeat", {"schema": 1, "node": "n", "memory": {}}),
            ("POST", "/api/v1/token", {"username": "a", "password": "b"}),
        ):
            # Well-formed credentials: only the database can say they are wrong.
            headers = {"Authorization": "Token x" if "agent" not in path else "Node n.secret"}
            r = httpx.request(method, url + path, json=body, headers=headers, timeout=30)
            assert r.status_code == 503, (path, r.status_code, r.text[:300])
            assert r.headers["Retry-After"] == "5", path
            assert "database cannot be reached" in r.json()["detail"], path
    finally:
        server.terminate()
        server.wait(10)
