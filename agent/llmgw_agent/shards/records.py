"""What the agent started: one small JSON file per running engine, so a restarted agent can
find its engines again (they outlive it: each runs in a session of its own).

A record names its process by pid *and* start time (ticks since boot, /proc/<pid>/stat
field 22) within one boot: a pid alone could by now be any other process. Files are
written whole (a temporary file renamed over the old one) with mode 0600: an agent killed
mid-write leaves the previous record or none, never half of one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .spec import ShardSpec, ShardSpecError

log = logging.getLogger("llmgw_agent.shards")

VERSION = 1


@dataclass(frozen=True)
class EngineRecord:
    shard: str
    replica: int | None
    generation: int
    pid: int
    start_time: int  # clock ticks since boot
    boot_id: str | None
    host: str  # serve_host when it was started: the address it listens on
    port: int
    engine: str  # the binary's path
    argv: tuple[str, ...]
    env: dict[str, str]  # what the agent set on top of its own environment
    spec: ShardSpec  # the desired shard it was started for
    log_path: str
    log_offset: int  # where its run starts in the log: its failure's tail is read from there
    started_at: str

    def as_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["argv"] = list(self.argv)
        spec = dataclasses.asdict(self.spec)
        out["spec"] = {k: list(v) if isinstance(v, tuple) else v for k, v in spec.items()}
        return {"version": VERSION, **out}

    @classmethod
    def from_json(cls, raw: object) -> EngineRecord:
        """Raises ValueError naming what is wrong with a record."""
        if not isinstance(raw, Mapping):
            raise ValueError("not a JSON object")
        if raw.get("version") != VERSION:
            raise ValueError(f"version {raw.get('version')!r}, not {VERSION}")
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(fields - raw.keys())
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")

        def typed(key: str, kind: type | tuple[type, ...]) -> Any:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ValueError(f"{key}: {value!r}")
            return value

        argv = typed("argv", list)
        env = typed("env", dict)
        if not all(isinstance(a, str) for a in argv) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("argv and env must hold strings")
        try:
            spec = ShardSpec.parse(typed("spec", dict))
        except ShardSpecError as exc:
            raise ValueError(f"spec: {exc}") from exc
        return cls(
            shard=typed("shard", str),
            replica=None if raw["replica"] is None else typed("replica", int),
            generation=typed("generation", int),
            pid=typed("pid", int),
            start_time=typed("start_time", int),
            boot_id=None if raw["boot_id"] is None else typed("boot_id", str),
            host=typed("host", str),
            port=typed("port", int),
            engine=typed("engine", str),
            argv=tuple(argv),
            env=dict(env),
            spec=spec,
            log_path=typed("log_path", str),
            log_offset=typed("log_offset", int),
            started_at=typed("started_at", str),
        )


class Records:
    """The records in one folder (`<log_dir>/running/`), one file per shard."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, shard_id: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", shard_id)
        if safe != shard_id or safe.startswith("."):
            # Two ids must not share a file: "a/b" and "a_b" would.
            safe = f"{safe.lstrip('.')}-{hashlib.sha256(shard_id.encode()).hexdigest()[:12]}"
        return self.folder / f"{safe}.json"

    def write(self, record: EngineRecord) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.path(record.shard)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        data = json.dumps(record.as_json(), indent=1, sort_keys=True).encode() + b"\n"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a leftover tmp file
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        # The rename itself must survive a power cut, or the engine runs unrecorded.
        dir_fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def remove(self, shard_id: str) -> None:
        try:
            self.path(shard_id).unlink()
        except FileNotFoundError:
            pass

    def load(self) -> list[EngineRecord]:
        """Every readable record; an unreadable one is logged and removed (it cannot name
        a process, so nothing can be done with it)."""
        out: list[EngineRecord] = []
        try:
            paths = sorted(self.folder.glob("*.json"))
        except OSError:
            return out
        for path in paths:
            try:
                record = EngineRecord.from_json(json.loads(path.read_bytes()))
            except (OSError, ValueError) as exc:
                log.warning("removing the unreadable engine record %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            if self.path(record.shard) != path:
                log.warning("removing %s: it records shard %s", path, record.shard)
                path.unlink(missing_ok=True)
                continue
            out.append(record)
        return out
