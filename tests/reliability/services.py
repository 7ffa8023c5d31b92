"""Private PostgreSQL and Redis instances for the reliability suite, each on
a free port in a folder of its own, so a scenario may stop, kill or freeze
them without touching any other server on the machine."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.servers import free_port

PG_BIN = (
    Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
    if glob.glob("/usr/lib/postgresql/*/bin")
    else None
)


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {port} after {timeout_s} s") from None
            time.sleep(0.1)


def _as_postgres(args: list[str]) -> list[str]:
    # initdb and the postmaster refuse to run as root.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _signal_if_alive(pid: int, sig: signal.Signals) -> None:
    # A backend whose client hung up exits between the listing and the
    # signal; that one needs neither freezing nor waking.
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Postgres:
    def __init__(self) -> None:
        if PG_BIN is None:
            raise RuntimeError("PostgreSQL's server binaries are not installed")
        # A folder of its own under /tmp: the postgres user cannot reach
        # into a test's temporary folder, which only its owner may enter.
        self.root = Path(tempfile.mkdtemp(prefix="llmgw-reliability-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self.data, self.port = self.root / "pgdata", free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/llmgw"

    def start(self) -> None:
        if not self.data.exists():
            subprocess.run(
                _as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                              "-A", "trust", "--no-sync"]),
                check=True, capture_output=True,
            )  # fmt: skip
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l",
                          str(self.root / "postgres.log"), "-o", options, "-w", "start"]),
            check=True, capture_output=True,
        )  # fmt: skip
        done = subprocess.run(
            _as_postgres([str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                          "postgres", "-tAc", "SELECT 1 FROM pg_database WHERE datname='llmgw'"]),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        if done.stdout.strip() != "1":
            subprocess.run(
                _as_postgres([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                              "-U", "postgres", "llmgw"]),
                check=True, capture_output=True,
            )  # fmt: skip

    def stop(self) -> None:
        """Down at once, as a crash: no checkpoint, every connection cut."""
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                          "-w", "stop"]),
            capture_output=True,
        )  # fmt: skip

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def master(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def children(self, master: int) -> list[int]:
        """The postmaster's children, and nothing else's."""
        children = []
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:
                children.append(int(Path(stat).parent.name))
        return children

    def pids(self) -> list[int]:
        """This instance's postmaster and its children, and nothing else's."""
        master = self.master()
        return [master, *self.children(master)]

    def hang(self) -> None:
        """Frozen, not gone: the kernel still accepts and acknowledges.
        The postmaster first, so it forks no child after the list is read."""
        master = self.master()
        os.kill(master, signal.SIGSTOP)
        for pid in self.children(master):
            _signal_if_alive(pid, signal.SIGSTOP)

    def resume(self) -> None:
        master = self.master()
        for pid in self.children(master):
            _signal_if_alive(pid, signal.SIGCONT)
        os.kill(master, signal.SIGCONT)

    def resume_if_hung(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self.resume()
            except (OSError, ValueError):
                pass


class Redis:
    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
