"""The shard supervisor: run what the control plane wants on this node, and report it."""

from __future__ import annotations

from .command import (
    Command,
    NotRunnable,
    advertised_host,
    build_command,
    find_engine,
    pick_port,
    resolve_gguf,
)
from .process import GroupMeter, ShardProcess, describe_exit
from .shard import State
from .spec import ShardSpec, ShardSpecError
from .supervisor import ShardSupervisor, Timing

__all__ = [
    "Command",
    "GroupMeter",
    "NotRunnable",
    "ShardProcess",
    "ShardSpec",
    "ShardSpecError",
    "ShardSupervisor",
    "State",
    "Timing",
    "advertised_host",
    "build_command",
    "describe_exit",
    "find_engine",
    "pick_port",
    "resolve_gguf",
]
