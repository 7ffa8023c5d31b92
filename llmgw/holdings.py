"""What the nodes hold, asked of the app that stores it.

Serving stores replicas, shards and GPU claims; the apps below it
(catalog, facility, placement, inventory) need answers from those rows
but may not import serving, nor walk its relations from their own models
(`Node.objects.filter(shards__...)` reads serving's tables from inside
another app: docs/data-ownership.md). So serving answers here: it
registers its reader in its AppConfig.ready(), as the heartbeat sections
register theirs, and the callers ask this module.

Asking before serving registered is a programming error, said as such:
an answer of "holds nothing" would be a lie that frees claimed GPUs.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple, Protocol


class ShardCount(NamedTuple):
    node: int
    model: str
    memory_gb: float | None
    cpu_cores: int | None
    shards: int


class ReplicaShard(NamedTuple):
    node: int
    replica: int
    model: str
    state: str
    gpus: tuple[int, ...]


class Reader(Protocol):
    def declared_watts(self, nodes: Collection[int] | None) -> dict[int, float]:
        """Node pk -> watts its shards' profiles declare (profiles that say),
        for these nodes or every node (None)."""

    def profiles_in_use(self, models: Collection[str]) -> dict[str, dict[str, int]]:
        """Model name -> profile name -> replicas that run on it, for the
        profiles that have any."""

    def shard_counts(self, nodes: Collection[int] | None) -> list[ShardCount]:
        """How many shards of each model and profile each node runs, with
        the memory and cores the profile declares, for these nodes or every
        node (None)."""

    def claimed_gpus(self, nodes: Collection[int] | None) -> list[tuple[int, int]]:
        """(node pk, GPU index) of every claimed card, for these nodes or
        every node (None)."""

    def replica_shards(self, nodes: Collection[int] | None) -> list[ReplicaShard]:
        """Each shard on these nodes or every node (None): its node, its
        replica, the replica's model and state, and the GPU indices it holds."""


_reader: list[Reader] = []


def register(reader: Reader) -> None:
    _reader[:] = [reader]


def reader() -> Reader:
    if not _reader:
        raise RuntimeError("no holdings reader registered: is llmgw.serving in INSTALLED_APPS?")
    return _reader[0]
