"""Small readers for /proc files, shared by several collectors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil


def read_text(path: Path) -> str | None:
    """The file's text, or None when it is absent or unreadable (unknown, not empty)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def meminfo(proc: Path) -> dict[str, int]:
    """<proc>/meminfo in bytes. The kernel says "kB" and means KiB."""
    text = (proc / "meminfo").read_text(encoding="ascii")
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if not fields:
            continue
        value = int(fields[0])
        if len(fields) > 1 and fields[1] == "kB":
            value *= 1024
        out[key.strip()] = value
    return out


_PSUTIL_ROOT = threading.Lock()


@contextmanager
def psutil_at(proc: Path) -> Iterator[None]:
    """psutil reading the given /proc (a host's, mounted into a container, or
    a recorded fixture). PROCFS_PATH is process-global, so it is set under a
    lock and put back: collectors for two roots never see each other's."""
    with _PSUTIL_ROOT:
        before = psutil.PROCFS_PATH
        psutil.PROCFS_PATH = str(proc)
        try:
            yield
        finally:
            psutil.PROCFS_PATH = before
