"""Which models' weights this node can already see, and whether they are on shared storage."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .mounts import Mount, existing_dirs, find_mount, mount_table
from .registry import Roots, collector

UNFINISHED_SUFFIXES = (".part", ".partial", ".incomplete", ".tmp", ".aria2")
UNFINISHED_NAMES = frozenset({".downloading"})


def is_unfinished(name: str) -> bool:
    return name in UNFINISHED_NAMES or name.endswith(UNFINISHED_SUFFIXES)


def _has_content(entry: os.DirEntry[str]) -> bool:
    try:
        # is_file/stat follow symlinks: a Hugging Face snapshot is links into blobs/.
        return entry.is_file() and entry.stat().st_size > 0
    except OSError:  # a dangling link is not weights
        return False


def is_complete_model(path: str) -> bool:
    """Non-empty and with no unfinished download anywhere inside.

    An empty directory is what a download that has not started looks like; placement sent
    there would find an engine that cannot load.
    """
    has_file = False
    for top, dirnames, filenames in os.walk(path):
        if any(is_unfinished(n) for n in (*dirnames, *filenames)):
            return False
        if not has_file:
            with os.scandir(top) as it:
                has_file = any(_has_content(e) for e in it)
    return has_file


def _shared(table: list[Mount] | None, path: str) -> bool:
    # When the mount table cannot say, local is the safe guess: a filer read as local costs
    # a needless copy; local read as shared makes a model look present on every node.
    mount = find_mount(table, path) if table is not None else None
    return mount.shared if mount is not None else False


def find_models(model_dir: str, table: list[Mount] | None) -> list[dict[str, Any]]:
    models: list[dict[str, Any]] = []
    with os.scandir(model_dir) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        # Hidden entries (.cache, .locks, .trash) are tool bookkeeping, not models.
        if entry.name.startswith(".") or is_unfinished(entry.name):
            continue
        path = os.path.join(model_dir, entry.name)
        if entry.is_dir():
            if not is_complete_model(path):
                continue
            name = entry.name
        elif entry.name.endswith(".gguf") and _has_content(entry):
            name = Path(entry.name).stem
        else:
            continue
        # Checked per model: a model directory can itself be a mount of a filer.
        models.append({"name": name, "path": path, "shared": _shared(table, path)})
    return models


@collector("weights")
def collect_weights(roots: Roots) -> dict[str, Any]:
    if not roots.model_dirs:
        # Told nowhere to look: ranks exactly like a node that looked and found nothing.
        return {"weights": {"probed": False, "models": []}}
    try:
        table: list[Mount] | None = mount_table(roots)
    except OSError:
        table = None
    models: list[dict[str, Any]] = []
    for model_dir in existing_dirs(roots.model_dirs):
        models.extend(find_models(model_dir, table))
    return {"weights": {"probed": True, "models": models}}
