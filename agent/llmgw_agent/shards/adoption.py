"""Engines that outlive the agent: recorded when started, taken over by the next agent.

A record is only trusted for the boot it was written in and while its pid still has the
recorded start time and leads its own session; anything else is not ours to signal. An
engine whose leader is gone may have left workers holding GPU memory: those go, as they
would had the agent seen the leader exit.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from .process import GroupMeter, ShardProcess, session_of, start_time, stdout_of
from .records import EngineRecord, Records
from .shard import Shard, now_iso
from .spec import ShardSpec

log = logging.getLogger("llmgw_agent.shards")


def record_engine(
    records: Records,
    boot: str | None,
    host: str,
    spec: ShardSpec,
    proc: ShardProcess,
    port: int,
    engine: str,
    env: dict[str, str],
) -> None:
    if proc.start_time is None:
        return  # it exited before it could be looked at; its exit is seen next poll
    record = EngineRecord(
        shard=spec.id, replica=spec.replica, generation=spec.generation, pid=proc.pid,
        start_time=proc.start_time, boot_id=boot, host=host, port=port,
        engine=engine, argv=proc.argv, env=dict(env), spec=spec,
        log_path=str(proc.log_path), log_offset=proc.log_offset, started_at=now_iso(),
    )  # fmt: skip
    try:
        records.write(record)
    except OSError as exc:
        # It runs on; only a restarted agent would not know it (and leave it alone).
        log.warning("shard %s: cannot record pid %d: %s", spec.id, proc.pid, exc)


def still_running(records: Records, boot: str | None, log_dir: Path) -> Iterator[EngineRecord]:
    """The recorded engines still running, to adopt; the records of the others are
    forgotten (and their leftovers killed) on the way."""
    recorded: set[int] = set()
    for record in records.load():
        recorded.add(record.pid)
        what = f"shard {record.shard}: pid {record.pid}"
        if record.boot_id != boot:
            log.info("%s was started before the machine last booted; forgetting it", what)
            records.remove(record.shard)
            continue
        ticks = start_time(record.pid)
        if ticks is None:
            _clear_leftovers(record, log_dir)
            records.remove(record.shard)
            continue
        if ticks != record.start_time or session_of(record.pid) != record.pid:
            # The kernel gave the pid to another process: not ours to signal.
            log.info("%s is another process now; forgetting the record", what)
            records.remove(record.shard)
            continue
        yield record
    _note_unrecorded(recorded, log_dir)


def adopted_shard(record: EngineRecord, serve_host: str) -> Shard:
    proc = ShardProcess.adopt(
        record.pid, record.start_time, record.argv, Path(record.log_path),
        record.generation, record.log_offset,
    )  # fmt: skip
    shard = Shard(record.spec, proc=proc, port=record.port, adopted=True)
    shard.meter = GroupMeter(proc.pid, proc.started)
    if record.host != serve_host:
        shard.restart_why = (
            f"restarting: serve_host is {serve_host} now, it listens on {record.host}"
        )
    log.info("shard %s: took over pid %d (port %d) from an earlier agent",
             record.shard, record.pid, record.port)  # fmt: skip
    shard.set("starting", f"taken over from an earlier agent: pid {record.pid}")
    return shard


def _shard_log_of(pid: int, log_dir: Path, log_path: Path | None = None) -> str | None:
    """The shard log the process writes to (`log_path`, or any in log_dir), if it does:
    engines and what they start write there, and little else on a node does."""
    target = stdout_of(pid)
    if log_path is not None:
        # Rotation renames the file under the engine: r12-0.log becomes r12-0.log.1.
        prefix = os.path.realpath(log_path)
    else:
        prefix = os.path.realpath(log_dir) + os.sep
    return target if target is not None and target.startswith(prefix) else None


def _clear_leftovers(record: EngineRecord, log_dir: Path) -> None:
    """The leader is gone; what it started may still hold GPU memory (vLLM's workers).
    They go, as they would had this agent seen the leader exit: those still in its group
    and writing to its log."""
    for pid in _pids():
        if _pgid(pid) != record.pid or not _shard_log_of(pid, log_dir, Path(record.log_path)):
            continue
        log.warning("shard %s: killing pid %d, left behind by its engine (pid %d)",
                    record.shard, pid, record.pid)  # fmt: skip
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _note_unrecorded(recorded: set[int], log_dir: Path) -> None:
    for pid in _pids():
        if pid in recorded or session_of(pid) != pid:
            continue
        target = _shard_log_of(pid, log_dir)
        if target is not None:
            # Started between a spawn and its record, or by hand: not known to be ours.
            log.warning("pid %d writes to %s, but no record says an agent started it; "
                        "leaving it alone", pid, target)  # fmt: skip


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None
