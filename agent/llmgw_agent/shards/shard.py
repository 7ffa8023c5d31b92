"""One shard as the supervisor tracks it: its state, its process, its restarts."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from .process import GroupMeter, ShardProcess
from .spec import ShardSpec

log = logging.getLogger("llmgw_agent.shards")

State = Literal["pending", "starting", "loading", "ready", "failed", "stopping"]
HISTORY = 100


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Shard:
    spec: ShardSpec
    state: State = "pending"
    message: str = ""
    since: str = field(default_factory=now_iso)
    wanted: bool = True
    proc: ShardProcess | None = None
    meter: GroupMeter | None = None
    port: int | None = None
    restarts: int = 0
    failures: int = 0  # in a row, for the backoff
    retry_at: float | None = None
    ready_at: float | None = None
    stop_deadline: float | None = None
    killed: bool = False
    health_due: float = 0.0
    last_failure: str = ""
    history: list[str] = field(default_factory=list)
    # Taken over from an earlier agent and not yet matched against a desired state.
    adopted: bool = False
    restart_why: str | None = None  # an adopted engine that is not what is wanted now

    def set(self, state: State, message: str) -> None:
        if (state, message) == (self.state, self.message):
            return
        if state != self.state:
            self.since = now_iso()
            log.info("shard %s: %s %s", self.spec.id, state, message)
        self.state, self.message = state, message
        self.history = [*self.history, f"{state}: {message}" if message else state][-HISTORY:]
