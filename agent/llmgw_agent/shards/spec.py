"""A shard as the control plane wants it: one entry of the heartbeat answer's desired.shards."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ShardSpecError(ValueError):
    """A malformed desired shard; the message names the field."""


def _opt_int(raw: Mapping[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    # bool is an int to Python; `true` threads is a mistake, not 1.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShardSpecError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def _opt_str(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ShardSpecError(f"{where}.{key}: expected a string, got {value!r}")
    return value or None


@dataclass(frozen=True)
class ShardSpec:
    id: str
    engine: str
    replica: int | None = None
    rank: int = 0
    model: str | None = None
    engine_version: str | None = None
    model_path: str | None = None
    source: str | None = None
    args: tuple[str, ...] = ()
    threads: int | None = None
    gpus: tuple[int, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    generation: int = 0

    @classmethod
    def parse(cls, raw: ShardSpec | Mapping[str, Any]) -> ShardSpec:
        if isinstance(raw, ShardSpec):
            return raw
        if not isinstance(raw, Mapping):
            raise ShardSpecError(f"a shard must be an object, got {raw!r}")
        shard_id = raw.get("id")
        if not isinstance(shard_id, str) or not shard_id:
            raise ShardSpecError(f"shard id must be a non-empty string, got {shard_id!r}")
        where = f"shard {shard_id}"
        engine = raw.get("engine")
        if not isinstance(engine, str) or not engine:
            raise ShardSpecError(f"{where}.engine: expected a non-empty string, got {engine!r}")
        args = raw.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ShardSpecError(f"{where}.args: expected a list of strings, got {args!r}")
        gpus = raw.get("gpus") or []
        if not isinstance(gpus, list) or not all(
            isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus
        ):
            raise ShardSpecError(f"{where}.gpus: expected GPU indices, got {gpus!r}")
        env = raw.get("env") or {}
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ShardSpecError(f"{where}.env: expected string names and values, got {env!r}")
        threads = _opt_int(raw, "threads", where)
        if threads is not None and threads < 1:
            raise ShardSpecError(f"{where}.threads: expected at least 1, got {threads}")
        return cls(
            id=shard_id,
            engine=engine,
            replica=_opt_int(raw, "replica", where),
            rank=_opt_int(raw, "rank", where) or 0,
            model=_opt_str(raw, "model", where),
            engine_version=_opt_str(raw, "engine_version", where),
            model_path=_opt_str(raw, "model_path", where),
            source=_opt_str(raw, "source", where),
            args=tuple(args),
            threads=threads,
            gpus=tuple(gpus),
            env=dict(env),
            generation=_opt_int(raw, "generation", where) or 0,
        )
