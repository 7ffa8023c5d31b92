"""The command stream's messages: a command the control plane sends down
the agent's WebSocket, and the result the agent sends back on it."""

from __future__ import annotations

from typing import Any

import msgspec


class Command(msgspec.Struct, kw_only=True, tag="command", tag_field="type"):
    id: int | str | None = None
    command: str
    args: dict[str, Any] | None = None
    timeout_s: float | None = None


class Result(msgspec.Struct, kw_only=True, omit_defaults=True, tag="result", tag_field="type"):
    id: int | str | None = None
    ok: bool
    # The command's output when ok, else why it failed.
    output: str | None = None
    error: str | None = None
