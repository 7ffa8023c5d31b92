"""How much room the node has left where its models live: one entry per filesystem."""

from __future__ import annotations

from typing import Any

from .mounts import existing_dirs, find_mount, mount_table
from .registry import Roots, collector


@collector("filesystems")
def collect_filesystems(roots: Roots) -> dict[str, Any]:
    # No model directories, or none of them present: nothing is known, so nothing is sent.
    # An empty list would read as a node with no room at all.
    dirs = existing_dirs(roots.model_dirs)
    if not dirs:
        return {}
    table = mount_table(roots)
    entries: dict[str, dict[str, Any]] = {}
    for directory in dirs:
        mount = find_mount(table, directory)
        if mount is None:
            raise LookupError(f"{directory} is on no mount listed in the mount table")
        # Free space belongs to the disk, not the path: two directories on one filesystem
        # are one pool of bytes, and listing it twice would let placement count it twice.
        entry = entries.get(mount.device_key)
        if entry is not None:
            entry["dirs"].append(directory)
            continue
        st = roots.statfs(directory)
        entries[mount.device_key] = {
            "mount": mount.mountpoint,
            "device": mount.source,
            "fstype": mount.fstype,
            "shared": mount.shared,
            # f_bavail, not f_bfree: the blocks reserved for root are not room for a model.
            "free_bytes": st.f_bavail * st.f_frsize,
            "total_bytes": st.f_blocks * st.f_frsize,
            "dirs": [directory],
        }
    return {"filesystems": list(entries.values())}
