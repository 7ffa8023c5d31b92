"""Small readers for /proc files, shared by several collectors."""

from __future__ import annotations

from pathlib import Path


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
