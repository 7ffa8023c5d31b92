"""The mount table, and which filesystems are shared between nodes."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .registry import Roots

# Network and cluster filesystems: their space and their contents belong to every node
# mounting them. ocfs2/gfs2 are shared block devices, as good as a filer for this purpose.
# virtiofs is 9p's successor for exporting a host directory into VMs; the protocol lists
# 9p as shared, so virtiofs is too (several guests of one host see the same bytes).
SHARED_FSTYPES = frozenset(
    {
        "nfs", "nfs4", "lustre", "cifs", "smb3", "smbfs", "ceph", "cephfs", "gpfs",
        "beegfs", "glusterfs", "9p", "virtiofs", "afs", "ocfs2", "gfs2", "panfs",
        "wekafs", "orangefs", "pvfs2", "fuse",
    }
)  # fmt: skip

_OCTAL = re.compile(r"\\([0-7]{3})")


def is_shared(fstype: str) -> bool:
    # Every fuse.<subtype> counts as shared (sshfs, juicefs, s3fs, rclone, glusterfs...), as
    # the protocol says; fuseblk (ntfs-3g on a local disk) does not match and stays local.
    return fstype in SHARED_FSTYPES or fstype.startswith("fuse.")


def _unescape(field: str) -> str:
    # The kernel writes space, tab, newline and backslash in paths as \040-style octal.
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    source: str
    fstype: str
    # What identifies the filesystem: major:minor from mountinfo, so bind mounts of one
    # disk collapse and two tmpfs instances (both sourced "tmpfs") do not.
    device_key: str

    @property
    def shared(self) -> bool:
        return is_shared(self.fstype)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 5 or len(fields) < sep + 3:
            continue
        fstype, source = fields[sep + 1], _unescape(fields[sep + 2])
        mounts.append(Mount(_unescape(fields[4]), source, fstype, f"dev:{fields[2]}"))
    return mounts


def parse_mounts(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        source, point, fstype = _unescape(fields[0]), _unescape(fields[1]), fields[2]
        # Without a device number, a source that names a device or an export identifies
        # the filesystem; a pseudo source ("tmpfs", "none") does not, so key by mountpoint.
        real_source = source.startswith("/") or ":" in source
        key = f"src:{source}" if real_source else f"mnt:{point}"
        mounts.append(Mount(point, source, fstype, key))
    return mounts


def mount_table(roots: Roots) -> list[Mount]:
    if roots.mounts is not None:
        text = roots.mounts.read_text(encoding="utf-8", errors="replace")
        is_info = roots.mounts.name == "mountinfo"
        return parse_mountinfo(text) if is_info else parse_mounts(text)
    for rel, parse in (
        ("self/mountinfo", parse_mountinfo),
        ("self/mounts", parse_mounts),
        ("mounts", parse_mounts),
    ):
        path = roots.proc / rel
        if path.exists():
            return parse(path.read_text(encoding="utf-8", errors="replace"))
    raise FileNotFoundError(f"no mount table under {roots.proc}")


def _within(path: str, mountpoint: str) -> bool:
    return mountpoint == "/" or path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")


def find_mount(table: list[Mount], path: str) -> Mount | None:
    """The mount holding `path`: the longest mountpoint prefix; the last such mount wins,
    since a later mount on the same point hides the earlier one."""
    real = os.path.realpath(path)
    best: Mount | None = None
    for mount in table:
        if _within(real, mount.mountpoint) and (
            best is None or len(mount.mountpoint) >= len(best.mountpoint)
        ):
            best = mount
    return best


def existing_dirs(model_dirs: tuple[str, ...]) -> list[str]:
    # A missing directory is what an unmounted filer looks like: skip it, never report it.
    return [d for d in model_dirs if Path(d).is_dir()]
