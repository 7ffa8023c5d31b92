"""The CLI's HTTP client: what it does with answers that are not plain JSON."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llmgw.cli.ctl_client import Api, CtlError


class Recorder(BaseHTTPRequestHandler):
    """Answers each path as `answers` says and notes the headers it was sent."""

    answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, headers, body = self.answers.get(self.path, (404, {}, b'{"detail": "no"}'))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Recorder.answers, Recorder.seen = {}, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_redirect_is_not_followed_so_the_token_stays_here(server):
    Recorder.answers["/api/v1/nodes"] = (302, {"Location": server + "/elsewhere"}, b"")
    with pytest.raises(CtlError, match="HTTP 302: redirected, not followed"):
        Api(server, "secret-token").get("/api/v1/nodes", [])
    assert [path for path, _ in Recorder.seen] == ["/api/v1/nodes"]


def test_an_error_names_the_request_and_the_servers_words(server):
    with pytest.raises(CtlError, match=r"GET /api/v1/x: HTTP 404: no$"):
        Api(server, "t").get("/api/v1/x", [])


def test_an_answer_that_is_not_json_says_so(server):
    Recorder.answers["/api/v1/nodes?state=Ready"] = (200, {}, b"<html>proxy login</html>")
    with pytest.raises(CtlError, match="not JSON: '<html>proxy login</html>'"):
        Api(server, "t").get("/api/v1/nodes", [("state", "Ready")])
    assert Recorder.seen == [("/api/v1/nodes?state=Ready", "Token t")]


def test_no_server_is_said_in_words():
    with pytest.raises(CtlError, match=r"cannot reach http://127\.0\.0\.1:1: .*refused"):
        Api("http://127.0.0.1:1", "t").get("/api/v1/nodes", [])
