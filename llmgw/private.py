"""Files only this account may read: the data directory, the secret key, CLI configurations with a token in them.

Each is made with its final mode (0700, 0600) in the call that creates it.
Creating a file with the process's umask (0644, typically) and chmod-ing it
afterwards leaves a window in which another local user can open it, and an
open file descriptor stays readable after the chmod. No Django here: the
settings module uses this before Django is set up.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def private_dir(path: Path, traverse_gid: int | None = None) -> Path:
    """`path`, made 0700 if it is not there. One that is there already and
    open to others (an install from before this rule: var/ was 0755) is
    closed, once: what is inside it was made readable to anyone.

    traverse_gid: a group that may pass through it (0710, its group that
    one): the embedded database's own account, run as root, which reaches
    its data directory below this one and can list nothing here."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    mode = stat.S_IMODE(st.st_mode)
    if traverse_gid is not None and st.st_gid == traverse_gid and mode & 0o077 == 0o010:
        return path
    if mode & 0o077:
        path.chmod(mode & 0o700)
    return path


def create_private(path: Path) -> bool:
    """Make an empty 0600 file at `path` unless one is there; True if made."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


def write_private(path: Path, text: str, replace: bool = True) -> bool:
    """Write `text` to `path` as a new 0600 file, whole or not at all.

    The text goes to a temporary file (mkstemp makes it 0600) that then
    takes the name, so a reader never sees half of it, and a file that was
    there keeps neither its content nor its mode. With replace=False an
    existing file wins (two processes starting at once agree on one secret
    key); returns whether `path` now holds `text`.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
