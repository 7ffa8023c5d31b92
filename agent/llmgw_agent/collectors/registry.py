"""Collector registry and runner, shaped like node_exporter's collector.go.

Each collector is a pure function of a `Roots`: everything it reads comes through
the roots (a /proc, a /sys, a command runner, a statfs), so tests point it at
recorded trees and the simulator at made-up ones.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

Part = Literal["register", "heartbeat"]


class StatFs(Protocol):
    """The three fields of statvfs the agent reads."""

    @property
    def f_bavail(self) -> int: ...
    @property
    def f_blocks(self) -> int: ...
    @property
    def f_frsize(self) -> int: ...


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


CommandRunner = Callable[[Sequence[str]], CommandResult]


def make_runner(wrapper: Sequence[str] = (), timeout_s: float = 30.0) -> CommandRunner:
    """A runner that prefixes `wrapper` (e.g. sudo -n) to every command.

    A timeout is mandatory: a hung nvidia-smi must cost one collector, not the heartbeat.
    """
    prefix = list(wrapper)

    def run(argv: Sequence[str]) -> CommandResult:
        done = subprocess.run(
            [*prefix, *argv], capture_output=True, text=True, timeout=timeout_s, check=False
        )
        return CommandResult(done.returncode, done.stdout, done.stderr)

    return run


@dataclass
class Roots:
    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    # The root filesystem, for etc/os-release: /host when the agent runs in a container.
    rootfs: Path = Path("/")
    run: CommandRunner = field(default_factory=make_runner)
    model_dirs: tuple[str, ...] = ()
    # Declared fabrics (agent.yaml `fabrics`): name -> adapters ("mlx5_0", or "mlx5_0/1").
    fabrics: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Monotonic seconds, for collectors that sample less often than every heartbeat.
    clock: Callable[[], float] = time.monotonic
    # None: <proc>/self/mountinfo, else <proc>/self/mounts, else <proc>/mounts.
    mounts: Path | None = None
    statfs: Callable[[str], StatFs] = os.statvfs
    # The first CPU reading has nothing to subtract from; wait this long for a second one
    # rather than send a utilisation of 0 that nobody measured. Tests set 0.
    cpu_first_sample_s: float = 0.25
    # Scratch space kept between runs (the previous CPU counters): utilisation is a rate.
    memo: dict[str, Any] = field(default_factory=dict)
    # Returns the pynvml module (or a fake with its functions). None: import pynvml when
    # reading the live host; a fixture root gets no NVML, so it never sees the test machine.
    nvml: Callable[[], Any] | None = None


Collect = Callable[[Roots], dict[str, Any]]


@dataclass(frozen=True)
class Collector:
    name: str
    part: Part
    func: Collect


REGISTRY: dict[str, Collector] = {}


def collector(name: str, part: Part = "heartbeat") -> Callable[[Collect], Collect]:
    def register(func: Collect) -> Collect:
        if name in REGISTRY:
            raise ValueError(f"collector {name!r} registered twice")
        REGISTRY[name] = Collector(name, part, func)
        return func

    return register


def run_collectors(
    roots: Roots,
    part: Part | None = None,
    enabled: dict[str, bool] | None = None,
    registry: dict[str, Collector] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the collectors of `part`; return the merged data and one result per collector.

    A collector that raises sends nothing (its keys stay absent, i.e. unknown) and is
    reported with its error; the others still run.
    """
    data: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    for c in (registry if registry is not None else REGISTRY).values():
        if part is not None and c.part != part:
            continue
        if enabled is not None and not enabled.get(c.name, True):
            continue
        started = time.perf_counter()
        error: str | None = None
        try:
            data.update(c.func(roots))
        except Exception as exc:  # noqa: BLE001 - isolating any failure is the point
            # Bounded: the control plane refuses a collector error over 2000 characters.
            error = f"{type(exc).__name__}: {exc}"[:1000]
        results.append(
            {
                "name": c.name,
                "ok": error is None,
                "seconds": round(time.perf_counter() - started, 6),
                "error": error,
            }
        )
    return data, results
