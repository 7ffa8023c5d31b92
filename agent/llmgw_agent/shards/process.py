"""One engine process in a process group of its own, its log, and what its group uses.

The engine runs in its own session (start_new_session=True), so its process group is
everything it started: vLLM's and SGLang's workers hold GPU memory, and stopping only the
leader would leave them holding it. Signals go to the group; measurements sum over it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import psutil

LOG_ROTATE_BYTES = 8 << 20
TAIL_LINES = 8
TAIL_CHARS = 800


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class ShardProcess:
    """A started engine. `pid` is also the process group id."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        generation: int,
    ) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if log_path.exists() and log_path.stat().st_size > LOG_ROTATE_BYTES:
            log_path.replace(log_path.with_name(log_path.name + ".1"))
        self.log_path = log_path
        self.generation = generation
        self.argv = tuple(argv)
        self.started = time.monotonic()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with open(log_path, "ab") as log:
            log.write(f"=== llmgw-agent {now}: {' '.join(argv)}\n".encode())
            # The tail of a failure is read from here on: older runs are not this one's words.
            self.log_offset = log.tell()
            self.popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
                close_fds=True,
            )
        self.pid = self.popen.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The leader's exit status once it has exited (and is reaped), else None."""
        if self.returncode is None:
            self.returncode = self.popen.poll()
        return self.returncode

    def signal_group(self, sig: int) -> bool:
        """Send `sig` to every process of the group; False when none is left."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            # A member that changed credentials; the rest got the signal.
            return True
        return True

    def group_alive(self) -> bool:
        # The leader must be reaped first: a zombie still counts as a member of its group.
        self.poll()
        return self.signal_group(0)

    def tail(self, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
        """The last non-empty lines this run wrote, joined with " | "."""
        try:
            with open(self.log_path, "rb") as log:
                size = log.seek(0, os.SEEK_END)
                start = max(self.log_offset, size - 16384)
                log.seek(start)
                data = log.read()
        except OSError:
            return ""
        text = data.decode("utf-8", "replace")
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        joined = " | ".join(kept)
        return joined if len(joined) <= chars else "..." + joined[-chars:]


class GroupMeter:
    """CPU cores used over the interval since the previous sample, and resident memory,
    summed over a process group."""

    def __init__(self, pgid: int, started: float) -> None:
        self.pgid = pgid
        self.at = started  # the first interval runs from the process's start
        self.cpu: dict[tuple[int, float], float] = {}

    def members(self) -> list[psutil.Process]:
        out = []
        for proc in psutil.process_iter():
            try:
                # A zombie uses nothing, and its times are already in its parent's.
                if os.getpgid(proc.pid) == self.pgid and proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(proc)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return out

    def sample(self) -> tuple[float | None, int | None]:
        now = time.monotonic()
        cpu: dict[tuple[int, float], float] = {}
        rss = 0
        for proc in self.members():
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    # Children's times count too: a worker the engine reaped moves its
                    # time into the engine's, and would otherwise vanish from the sum.
                    seconds = t.user + t.system + t.children_user + t.children_system
                    cpu[(proc.pid, proc.create_time())] = seconds
                    rss += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if not cpu:
            return None, None
        used = sum(max(0.0, s - self.cpu.get(key, 0.0)) for key, s in cpu.items())
        elapsed = now - self.at
        self.cpu, self.at = cpu, now
        return (used / elapsed if elapsed > 0 else None), rss
