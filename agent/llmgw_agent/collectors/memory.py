"""Memory in use and available."""

from __future__ import annotations

from typing import Any

import psutil

from .procfs import psutil_at
from .registry import Roots, collector


@collector("memory")
def collect_memory(roots: Roots) -> dict[str, Any]:
    with psutil_at(roots.proc):
        vm = psutil.virtual_memory()
    # available is the kernel's MemAvailable (reclaimable cache included); free would make
    # every node with a warm page cache look full. Used is what is not available, which is
    # what stops a model from loading; psutil's own "used" leaves out buffers and cache.
    total, available = vm.total, vm.available
    return {"memory": {"used_bytes": total - available, "available_bytes": available}}
