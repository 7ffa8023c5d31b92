"""The collectors. Importing this package registers every one of them."""

from . import (  # noqa: F401 - registers them
    cpu,
    filesystems,
    gpu,
    gpu_imex,
    ib,  # imports sm first: the sm collector runs before ib, whose ports read it
    memory,
    sensors,
    system,
    weights,
)
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
