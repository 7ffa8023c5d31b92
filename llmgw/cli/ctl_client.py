"""What every `llmgw ctl` command shares: where the server is, the client
that calls it and turns its refusals into words, and the table printer."""

from __future__ import annotations

import email.utils
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

DASH = "-"


class CtlError(Exception):
    pass


def config() -> tuple[str, str]:
    url, token = os.environ.get("LLMGW_URL"), os.environ.get("LLMGW_TOKEN")
    path = Path(os.environ.get("LLMGW_CONFIG", Path.home() / ".config" / "llmgw" / "cli.yaml"))
    if (not url or not token) and path.exists():
        import yaml  # only when there is a file to read: it costs every command its import

        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise CtlError(f"{path}: expected url: and token: keys")
        url, token = url or data.get("url"), token or data.get("token")
    if not url or not token:
        raise CtlError(f"set LLMGW_URL and LLMGW_TOKEN, or write url: and token: to {path}")
    return str(url).rstrip("/"), str(token)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it came: following it would send the
    token to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Api:
    """The REST API through the standard library: httpx costs every command
    ~0.1 s of CPU to import, as much as `ctl status` spends on the answer.
    Proxies are taken from the environment (HTTPS_PROXY, NO_PROXY), as a
    laptop's other tools take them."""

    def __init__(self, url: str, token: str, timeout: float = 30) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Authorization": f"Token {token}", "Accept": "application/json"}
        self.opener = urllib.request.build_opener(_NoRedirects)
        # The server's clock at its last answer (its Date header): an age
        # worked out against it does not carry the laptop's clock's error.
        self.server_date: datetime | None = None

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        accept: tuple[int, ...] = (),
        params: list[tuple[str, str]] | None = None,
    ) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=self.timeout) as answer:
                status, text = answer.status, answer.read().decode("utf-8", "replace")
                self.server_date = _date(answer.headers.get("Date"))
        except urllib.error.HTTPError as exc:  # an answer, with its status
            status, text = exc.code, exc.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise CtlError(f"cannot reach {self.url}: {reason}") from None
        if status >= 400 and status not in accept:
            if status == 409 and "explanation" in text:
                refused = json.loads(text)
                lines = "\n".join((refused.get("explanation") or {}).get("lines") or [])
                raise CtlError(f"refused: {refused['detail']}" + (f"\n{lines}" if lines else ""))
            try:
                detail = json.loads(text)
            except ValueError:
                detail = text.strip()
            raise CtlError(f"{method} {path}: HTTP {status}: {_words(detail)}")
        if 300 <= status < 400:
            raise CtlError(f"{method} {path}: HTTP {status}: redirected, not followed")
        if not text:
            return None  # 204: nothing to say
        try:
            return json.loads(text)
        except ValueError:
            raise CtlError(f"{method} {path}: HTTP {status}: not JSON: {text[:200]!r}") from None

    def get(self, path: str, params: list[tuple[str, str]]) -> Any:
        return self.call("GET", path, params=params)


def _date(header: str | None) -> datetime | None:
    try:
        return email.utils.parsedate_to_datetime(header) if header else None
    except (TypeError, ValueError):
        return None


def _words(detail: Any) -> str:
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        return str(detail["detail"])
    return json.dumps(detail) if not isinstance(detail, str) else detail


class Outcome(str):
    """A command's output, printed like any other, and the status ctl exits
    with: what was asked ran, and found something wrong (a script reads the
    status, not the words)."""

    status: int

    def __new__(cls, text: str, status: int) -> Outcome:
        out = super().__new__(cls, text)
        out.status = status
        return out


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)
