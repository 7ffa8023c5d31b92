"""Fetch a release archive to a temporary file, hashing as it streams."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

Progress = Callable[[str], None]
Sink = Callable[[bytes], None]


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
    timeout_s: float = 60.0,
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

            def sink(chunk: bytes) -> None:
                digest.update(chunk)
                out.write(chunk)

            if urlsplit(url).scheme == "file":
                _copy_file(Path(unquote(urlsplit(url).path)), sink, name, progress)
            else:
                _stream(url, sink, name, progress, client, stop, timeout_s)
        got = digest.hexdigest()
        if got != sha256.lower():
            raise DownloadError(f"sha256 mismatch: expected {sha256.lower()}, got {got}")
        return path
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _copy_file(src: Path, sink: Sink, name: str, progress: Progress) -> None:
    try:
        size = src.stat().st_size
        progress(f"downloading {name} ({human_size(size)})")
        with open(src, "rb") as f:
            while chunk := f.read(1 << 20):
                sink(chunk)
    except OSError as exc:
        raise DownloadError(f"cannot read {src}: {exc.strerror}") from exc


def _stream(
    url: str,
    sink: Sink,
    name: str,
    progress: Progress,
    client: httpx.Client | None,
    stop: threading.Event | None,
    timeout_s: float,
) -> None:
    own = client is None
    http = client or httpx.Client(follow_redirects=True, timeout=timeout_s)
    try:
        with http.stream("GET", url) as response:
            if response.status_code != 200:
                raise DownloadError(f"download of {name} failed: HTTP {response.status_code}")
            total = int(response.headers.get("Content-Length") or 0) or None
            size = human_size(total) if total else "size unknown"
            progress(f"downloading {name} ({size})")
            done, shown = 0, -1
            for chunk in response.iter_bytes(1 << 16):
                if stop is not None and stop.is_set():
                    raise DownloadError(f"download of {name} stopped: the agent is shutting down")
                sink(chunk)
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
    except httpx.HTTPError as exc:
        raise DownloadError(f"download of {name} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            http.close()
