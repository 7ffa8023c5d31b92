"""One engine process in a process group of its own, its log, and what its group uses.

The engine runs in its own session (start_new_session=True), so its process group is
everything it started: vLLM's and SGLang's workers hold GPU memory, and stopping only the
leader would leave them holding it. Signals go to the group; measurements sum over it.
The session also keeps the agent's own end (SIGTERM, SIGKILL, an upgrade) from reaching
the engine: it outlives the agent, and the next one adopts it, knowing it by its pid and
its start time in /proc.
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
PROC = Path("/proc")


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; None when there is no such process."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces and ")".
    return raw[raw.rfind(")") + 2 :].split()


def start_time(pid: int, proc: Path = PROC) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat);
    None when it is gone or a zombie (a zombie is an exited process, whatever its pid)."""
    fields = _stat_fields(pid, proc)
    if not fields or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def session_of(pid: int, proc: Path = PROC) -> int | None:
    fields = _stat_fields(pid, proc)
    if not fields or len(fields) < 4:
        return None
    try:
        return int(fields[3])
    except ValueError:
        return None


def same_process(pid: int, ticks: int | None, proc: Path = PROC) -> bool:
    """Whether `pid` is still the process that started at `ticks`, and has not exited."""
    return ticks is not None and start_time(pid, proc) == ticks


def boot_id(proc: Path = PROC) -> str | None:
    """This boot's id: start times count from the boot, so they compare only within one."""
    try:
        return (proc / "sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def process_age(ticks: int) -> float:
    """Seconds since a process that started `ticks` after boot did (CLOCK_BOOTTIME: the
    clock /proc's start times count on)."""
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return max(0.0, age)


def stdout_of(pid: int, proc: Path = PROC) -> str | None:
    """Where the process's standard output goes (a path, `pipe:[...]`...), if it may be read."""
    try:
        return os.readlink(proc / str(pid) / "fd" / "1")
    except OSError:
        return None


class ShardProcess:
    """An engine this agent runs: one it started (`spawn`), or one an earlier agent started
    and this one took over (`adopt`). `pid` is also the process group id."""

    def __init__(
        self,
        pid: int,
        start_time: int | None,
        argv: Sequence[str],
        log_path: Path,
        generation: int,
        *,
        log_offset: int = 0,
        started: float | None = None,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        # Ticks since boot (/proc/<pid>/stat): with the pid, names this process and no
        # later one that the kernel gives the same pid.
        self.start_time = start_time
        self.argv = tuple(argv)
        self.log_path = log_path
        self.generation = generation
        self.log_offset = log_offset
        self.started = time.monotonic() if started is None else started
        self.popen = popen
        self.returncode: int | None = None
        self.ended: str | None = None  # how the leader ended, once it has

    @classmethod
    def spawn(
        cls, argv: Sequence[str], env: Mapping[str, str], log_path: Path, generation: int
    ) -> ShardProcess:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if log_path.exists() and log_path.stat().st_size > LOG_ROTATE_BYTES:
            log_path.replace(log_path.with_name(log_path.name + ".1"))
        started = time.monotonic()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with open(log_path, "ab") as log:
            log.write(f"=== llmgw-agent {now}: {' '.join(argv)}\n".encode())
            # The tail of a failure is read from here on: older runs are not this one's words.
            offset = log.tell()
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                # Its own session: the agent's death (SIGKILL, an upgrade) does not reach it.
                start_new_session=True,
                close_fds=True,
            )
        # The child exists once Popen returns (unreaped until we wait): its start time is
        # there to read, whatever it does next.
        return cls(
            popen.pid,
            start_time(popen.pid),
            argv,
            log_path,
            generation,
            log_offset=offset,
            started=started,
            popen=popen,
        )

    @classmethod
    def adopt(
        cls,
        pid: int,
        start_ticks: int,
        argv: Sequence[str],
        log_path: Path,
        generation: int,
        log_offset: int,
    ) -> ShardProcess:
        """An engine an earlier agent started; `started` is put where its real start was, so
        the first CPU interval counts from there, as for an engine this agent starts."""
        return cls(
            pid,
            start_ticks,
            argv,
            log_path,
            generation,
            log_offset=log_offset,
            started=time.monotonic() - process_age(start_ticks),
        )

    def poll(self) -> str | None:
        """None while the leader runs; once it has exited (and is reaped), how it ended."""
        if self.ended is not None:
            return self.ended
        if self.popen is not None:
            self.returncode = self.popen.poll()
            if self.returncode is not None:
                self.ended = describe_exit(self.returncode)
        elif not same_process(self.pid, self.start_time):
            # Not our child: its parent (init, now) reaped it and kept the status.
            self.ended = "exited (an earlier agent started it: its status is unknown)"
        return self.ended

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

    def wait(self, timeout: float) -> None:
        if self.popen is not None:
            self.popen.wait(timeout=timeout)

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
