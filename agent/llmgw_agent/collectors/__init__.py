"""The collectors. Importing this package registers every one of them."""

from . import cpu, filesystems, memory, system, weights  # noqa: F401 - registers them
from .registry import (
    REGISTRY,
    CommandResult,
    CommandRunner,
    Roots,
    StatFs,
    collector,
    make_runner,
    run_collectors,
)

__all__ = [
    "REGISTRY",
    "CommandResult",
    "CommandRunner",
    "Roots",
    "StatFs",
    "collector",
    "make_runner",
    "run_collectors",
]
