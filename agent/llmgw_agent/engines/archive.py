"""Unpack a release archive without letting any member out of the install directory.

Every member is checked before anything is written: an absolute path, a `..` that climbs
out, a member written through a link, a symlink whose target (followed through the
archive's other symlinks, as the kernel would) leaves the directory, a hard link to
anything but a regular file of the archive, and devices or FIFOs are all refused, naming
the member. Only then is the archive extracted, with tarfile's own "data" filter on top.

Unpacking is bounded too: an archive whose members add up to more than agent.yaml's
`engines_max_unpacked_gib`, or that holds more than MAX_MEMBERS members, is refused before
anything is written (a few kilobytes of gzip can unpack to terabytes of zeros). An archive
that cannot be read to its end is refused as damaged, saying what broke.
"""

from __future__ import annotations

import gzip
import lzma
import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from .sizes import format_bytes_pair

# The kernel gives up after 40 links in one lookup (ELOOP); so does this.
MAX_LINK_HOPS = 40
# A llama.cpp release unpacks to well under 1 GiB, a CUDA build with its runtime
# libraries to 2 or so; agent.yaml can raise it (engines_max_unpacked_gib).
MAX_UNPACKED_BYTES = 4 << 30
# Releases hold tens of files; this is far past any engine and far short of running the
# filesystem out of inodes.
MAX_MEMBERS = 20_000
LIMIT_KEY = "engines_max_unpacked_gib"

# What reading a damaged archive raises, besides tarfile's and zipfile's own errors. gzip
# and bz2 raise OSError for a bad stream, but without an errno, unlike a failed write.
_DAMAGED = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    lzma.LZMAError,
    gzip.BadGzipFile,
    EOFError,
    NotImplementedError,  # a zip compression method Python cannot read
)


class ArchiveError(Exception):
    """The archive cannot be unpacked; the message says why."""


class UnsafeArchiveError(ArchiveError):
    """A member would land (or point) outside the install directory, or it is too big."""


class DamagedArchiveError(ArchiveError):
    """The archive cannot be read to its end: truncated, a bad checksum, bad compression."""


@dataclass(frozen=True)
class Member:
    name: str  # as written in the archive
    path: str  # normalised, relative to the install directory
    kind: str  # "file", "dir", "symlink", "hardlink"
    target: str = ""  # a link's target, as written


def _normalise(name: str, shown: str) -> str:
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"archive member {shown!r} has an absolute path")
    path = posixpath.normpath(name)
    if path == ".." or path.startswith("../"):
        raise UnsafeArchiveError(f"archive member {shown!r} leaves the install directory")
    return "" if path == "." else path


class _Tree:
    """The archive's own namespace, to resolve symlinks the way the kernel will."""

    def __init__(self, members: list[Member]) -> None:
        self.links = {m.path: m.target for m in members if m.kind == "symlink"}
        self.kinds = {m.path: m.kind for m in members}

    def resolve(self, start: list[str], target: str, shown: str) -> list[str]:
        """The components `target` (seen from directory `start`) ends at, or refuse."""
        if target.startswith("/"):
            raise UnsafeArchiveError(
                f"archive member {shown!r} is a link to {target!r}, outside the install directory"
            )
        done = list(start)
        pending = [p for p in target.split("/") if p not in ("", ".")]
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if not done:
                    raise UnsafeArchiveError(
                        f"archive member {shown!r} is a link that leaves the install directory"
                    )
                done.pop()
                continue
            here = "/".join([*done, part])
            if here in self.links:
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise UnsafeArchiveError(f"archive member {shown!r}: too many levels of links")
                link = self.links[here]
                if link.startswith("/"):
                    raise UnsafeArchiveError(
                        f"archive member {shown!r} is a link to {here!r}, "
                        f"which points outside the install directory ({link!r})"
                    )
                pending = [p for p in link.split("/") if p not in ("", ".")] + pending
                continue
            done.append(part)
        return done


def check_members(members: list[Member]) -> None:
    """Refuse the archive if any member could end up outside the install directory."""
    tree = _Tree(members)
    for m in members:
        parts = m.path.split("/") if m.path else []
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in tree.links:
                raise UnsafeArchiveError(
                    f"archive member {m.name!r} would be written through the link {parent!r}"
                )
        if m.kind == "symlink":
            tree.resolve(parts[:-1], m.target, m.name)
        elif m.kind == "hardlink":
            target = _normalise(m.target, m.name)
            if target.startswith(".."):  # pragma: no cover - _normalise refuses it
                raise UnsafeArchiveError(f"archive member {m.name!r} leaves the install directory")
            kind = tree.kinds.get(target)
            if kind != "file":
                what = "a link" if kind in ("symlink", "hardlink") else f"{kind or 'nothing'}"
                raise UnsafeArchiveError(
                    f"archive member {m.name!r} is a hard link to {m.target!r}, "
                    f"which is {what} in this archive, not a regular file"
                )


def _too_big(total: int, limit: int, exact: bool) -> UnsafeArchiveError:
    got, allowed = format_bytes_pair(total, limit)
    return UnsafeArchiveError(
        f"unpacks to {'' if exact else 'at least '}{got}, more than the {allowed} allowed "
        f"({LIMIT_KEY} in agent.yaml)"
    )


def _too_many(count: int, limit: int, exact: bool) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"holds {'' if exact else 'at least '}{count} members, more than the {limit} allowed"
    )


def _tar_members(
    tar: tarfile.TarFile, max_bytes: int, max_members: int
) -> tuple[list[tarfile.TarInfo], list[Member]]:
    infos: list[tarfile.TarInfo] = []
    out: list[Member] = []
    total = 0
    # One header at a time, counting as it goes: getmembers() would first decompress the
    # whole stream, bomb included, to find the last header.
    for info in tar:
        if len(out) == max_members:
            raise _too_many(len(out) + 1, max_members, exact=False)
        if info.isreg():
            total += info.size
            if total > max_bytes:
                raise _too_big(total, max_bytes, exact=False)
        path = _normalise(info.name, info.name)
        if info.isdir():
            kind = "dir"
        elif info.isreg():
            kind = "file"
        elif info.issym():
            kind = "symlink"
        elif info.islnk():
            # A hard link's target is named from the archive's root, not the member's folder.
            if info.linkname.startswith("/"):
                raise UnsafeArchiveError(
                    f"archive member {info.name!r} is a hard link to {info.linkname!r}, "
                    "outside the install directory"
                )
            _normalise(info.linkname, info.name)
            kind = "hardlink"
        else:
            raise UnsafeArchiveError(
                f"archive member {info.name!r} is a device or FIFO, not a file, folder or link"
            )
        infos.append(info)
        out.append(Member(info.name, path, kind, info.linkname))
    return infos, out


def _zip_members(zf: zipfile.ZipFile, max_bytes: int, max_members: int) -> list[Member]:
    infos = zf.infolist()
    if len(infos) > max_members:
        raise _too_many(len(infos), max_members, exact=True)
    # zipfile never inflates a member past the size its header declares (it stops there,
    # and a CRC mismatch is an error), so the declared sizes bound what is written.
    total = sum(i.file_size for i in infos if not i.is_dir())
    if total > max_bytes:
        raise _too_big(total, max_bytes, exact=True)
    out = []
    for info in infos:
        # Some Windows tools write backslashes; read them as the separators they meant.
        name = info.filename.replace("\\", "/")
        path = _normalise(name, info.filename)
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            target = zf.read(info).decode("utf-8", "replace")
            out.append(Member(info.filename, path, "symlink", target))
        elif info.is_dir():
            out.append(Member(info.filename, path, "dir"))
        else:
            out.append(Member(info.filename, path, "file"))
    return out


def _extract_zip(zf: zipfile.ZipFile, members: list[Member], dest: Path) -> None:
    for info, m in zip(zf.infolist(), members, strict=True):
        out = dest / m.path
        if m.kind == "dir":
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        if m.kind == "symlink":
            os.symlink(m.target, out)
            continue
        with zf.open(info) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        # zipfile keeps no modes; the Unix ones ride in external_attr (executables!).
        mode = (info.external_attr >> 16) & 0o777
        os.chmod(out, (mode or 0o644) & 0o755)


def _verify_tree(dest: Path) -> None:
    """After extraction: every link must still resolve inside (belt and braces)."""
    root = os.path.realpath(dest)
    for dirpath, dirnames, filenames in os.walk(dest):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                real = os.path.realpath(path)
                if real != root and not real.startswith(root + os.sep):
                    rel = os.path.relpath(path, dest)
                    raise UnsafeArchiveError(
                        f"archive member {rel!r} is a link that leaves the install directory"
                    )


def unpack(
    archive: Path,
    dest: Path,
    *,
    max_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> None:
    """Unpack a tar (any compression) or zip archive into `dest`, which must be empty.

    Raises ArchiveError (UnsafeArchiveError, DamagedArchiveError) for anything wrong with
    the archive; OSError only for the node's own trouble (a full disk, permissions).
    """
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                members = _zip_members(zf, max_bytes, max_members)
                check_members(members)
                _extract_zip(zf, members, dest)
        else:
            try:
                tar = tarfile.open(archive, mode="r:*")
            except tarfile.TarError as exc:
                raise UnsafeArchiveError(f"not a tar or zip archive: {exc}") from exc
            with tar:
                infos, members = _tar_members(tar, max_bytes, max_members)
                check_members(members)
                # The "data" filter (Python 3.11.4+) refuses the same things once more.
                tar.extractall(dest, members=infos, filter="data")
    except tarfile.FilterError as exc:
        raise UnsafeArchiveError(str(exc)) from exc
    except _DAMAGED as exc:
        raise DamagedArchiveError(str(exc) or type(exc).__name__) from exc
    except OSError as exc:
        if exc.errno is not None:
            raise
        raise DamagedArchiveError(str(exc) or type(exc).__name__) from exc
    _verify_tree(dest)


def archive_root(dest: Path) -> Path:
    """The folder the release's files are in: upstream packs them under one `llama-<tag>/`."""
    entries = [e for e in dest.iterdir() if not e.name.startswith(".llmgw")]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return dest
