"""Fetch a release archive to a temporary file, hashing as it streams.

Bounded every way a mirror can misbehave: a connect timeout, a read timeout (no byte for
that long: stalled), a deadline for the whole download (a server that drips a byte now
and then never trips the read timeout) and a size limit (a server that never stops
sending would fill the disk before the sha256 could be checked).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from .archive import LIMIT_KEY
from .sizes import format_bytes, format_bytes_pair

Progress = Callable[[str], None]
Sink = Callable[[bytes], object]

CONNECT_S = 30.0
READ_S = 60.0
# Half an hour: a 1 GiB CUDA build at 1 MB/s takes 18 minutes.
DEADLINE_S = 1800.0


@dataclass(frozen=True)
class DownloadLimits:
    connect_s: float = CONNECT_S
    read_s: float = READ_S
    # The whole download ends by then, give or take one read timeout.
    deadline_s: float = DEADLINE_S
    max_bytes: int | None = None


class DownloadError(Exception):
    """The archive could not be fetched, or is not the one the control plane named."""


def filename_of(url: str) -> str:
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1]) or "download"


def human_size(n: int) -> str:
    """Decimal megabytes, as a release page shows them: "16 MB", "0.4 MB", "1.2 GB"."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f} GB"
    if n >= 10_000_000:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e6:.1f} MB"


def download(
    url: str,
    dest_dir: Path,
    *,
    sha256: str,
    progress: Progress,
    client: httpx.Client | None = None,
    stop: threading.Event | None = None,
    limits: DownloadLimits = DownloadLimits(),
) -> Path:
    """Download `url` into a new file under `dest_dir` and return it.

    The file is removed again unless its sha256 is `sha256`. Progress is reported as
    "downloading NAME (SIZE, N%)", once per percent.
    """
    name = filename_of(url)
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=dest_dir)
    path = Path(tmp)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            transfer = _Transfer(name, limits, out.write, digest.update)
            if urlsplit(url).scheme == "file":
                _copy_file(Path(unquote(urlsplit(url).path)), transfer, progress)
            else:
                _stream(url, transfer, progress, client, stop)
        got = digest.hexdigest()
        if got != sha256.lower():
            raise DownloadError(f"sha256 mismatch: expected {sha256.lower()}, got {got}")
        return path
    except BaseException:
        path.unlink(missing_ok=True)
        raise


class _Transfer:
    """Counts what arrives and refuses it past the size limit or the deadline."""

    def __init__(self, name: str, limits: DownloadLimits, *sinks: Sink) -> None:
        self.name, self.limits, self.sinks = name, limits, sinks
        self.deadline = time.monotonic() + limits.deadline_s
        self.total: int | None = None
        self.done = 0

    def expect(self, total: int | None) -> None:
        self.total = total
        limit = self.limits.max_bytes
        if total is not None and limit is not None and total > limit:
            size, allowed = format_bytes_pair(total, limit)
            raise DownloadError(
                f"download of {self.name} is {size}, more than the {allowed} allowed "
                f"({LIMIT_KEY} in agent.yaml)"
            )

    def add(self, chunk: bytes) -> None:
        self.done += len(chunk)
        limit = self.limits.max_bytes
        if limit is not None and self.done > limit:
            raise DownloadError(
                f"download of {self.name} passed the {format_bytes(limit)} allowed "
                f"({LIMIT_KEY} in agent.yaml)"
            )
        for sink in self.sinks:
            sink(chunk)
        if time.monotonic() > self.deadline:
            if self.total:
                done, total = format_bytes_pair(self.done, self.total)
                got = f"{done} of {total} received"
            else:
                got = f"{format_bytes(self.done)} received"
            raise DownloadError(
                f"download of {self.name} did not finish within "
                f"{self.limits.deadline_s:g} s ({got})"
            )


def _copy_file(src: Path, transfer: _Transfer, progress: Progress) -> None:
    try:
        size = src.stat().st_size
        progress(f"downloading {transfer.name} ({human_size(size)})")
        with open(src, "rb") as f:
            while chunk := f.read(1 << 20):
                transfer.add(chunk)
    except OSError as exc:
        raise DownloadError(f"cannot read {src}: {exc.strerror}") from exc


def _stream(
    url: str,
    transfer: _Transfer,
    progress: Progress,
    client: httpx.Client | None,
    stop: threading.Event | None,
) -> None:
    name, limits = transfer.name, transfer.limits
    # Per request, so a client handed in (tests, a proxy's) is bounded the same way.
    timeout = httpx.Timeout(limits.read_s, connect=limits.connect_s)
    own = client is None
    http = client or httpx.Client(follow_redirects=True, timeout=timeout)
    try:
        with http.stream("GET", url, timeout=timeout) as response:
            if response.status_code != 200:
                raise DownloadError(f"download of {name} failed: HTTP {response.status_code}")
            total = int(response.headers.get("Content-Length") or 0) or None
            transfer.expect(total)
            size = human_size(total) if total else "size unknown"
            progress(f"downloading {name} ({size})")
            done, shown = 0, -1
            # Chunks as they arrive (not gathered to a size), so the deadline is checked
            # even while a server drips.
            for chunk in response.iter_bytes():
                if stop is not None and stop.is_set():
                    raise DownloadError(f"download of {name} stopped: the agent is shutting down")
                transfer.add(chunk)
                done += len(chunk)
                if total:
                    percent = min(100, done * 100 // total)
                    if percent != shown:
                        shown = percent
                        progress(f"downloading {name} ({size}, {percent}%)")
                elif done // 10_000_000 != (done - len(chunk)) // 10_000_000:
                    progress(f"downloading {name} ({human_size(done)} so far)")
            if total and done != total:
                raise DownloadError(f"download of {name} ended early: {done} of {total} bytes")
    except httpx.ConnectTimeout as exc:
        host = urlsplit(url).hostname
        raise DownloadError(
            f"download of {name} failed: no connection to {host} within {limits.connect_s:g} s"
        ) from exc
    except httpx.ReadTimeout as exc:
        raise DownloadError(f"download of {name} stalled: no data for {limits.read_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise DownloadError(f"download of {name} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            http.close()
