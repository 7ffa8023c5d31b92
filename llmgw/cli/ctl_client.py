"""What every `llmgw ctl` command shares: where the server is, the client
that calls it and turns its refusals into words, and the table printer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import yaml

DASH = "-"


class CtlError(Exception):
    pass


def config() -> tuple[str, str]:
    url, token = os.environ.get("LLMGW_URL"), os.environ.get("LLMGW_TOKEN")
    path = Path(os.environ.get("LLMGW_CONFIG", Path.home() / ".config" / "llmgw" / "cli.yaml"))
    if (not url or not token) and path.exists():
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise CtlError(f"{path}: expected url: and token: keys")
        url, token = url or data.get("url"), token or data.get("token")
    if not url or not token:
        raise CtlError(f"set LLMGW_URL and LLMGW_TOKEN, or write url: and token: to {path}")
    return str(url).rstrip("/"), str(token)


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Token {token}"}, timeout=30
        )

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        accept: tuple[int, ...] = (),
        params: list[tuple[str, str]] | None = None,
    ) -> Any:
        try:
            response = self.client.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise CtlError(f"cannot reach {self.client.base_url}: {exc}") from None
        if response.status_code >= 400 and response.status_code not in accept:
            if response.status_code == 409 and "explanation" in response.text:
                data = response.json()
                text = "\n".join((data.get("explanation") or {}).get("lines") or [])
                raise CtlError(f"refused: {data['detail']}" + (f"\n{text}" if text else ""))
            try:
                detail = response.json()
            except ValueError:
                detail = response.text.strip()
            raise CtlError(f"{method} {path}: HTTP {response.status_code}: {_words(detail)}")
        return response.json()

    def get(self, path: str, params: list[tuple[str, str]]) -> Any:
        return self.call("GET", path, params=params)


def _words(detail: Any) -> str:
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        return str(detail["detail"])
    return json.dumps(detail) if not isinstance(detail, str) else detail


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)
