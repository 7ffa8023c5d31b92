"""Converge the node on the engines the control plane wants, without stalling heartbeats.

The main loop calls `heartbeat(desired)` once per heartbeat: it records what is wanted,
wakes one background worker if there is work, and returns what to report right now. The
worker does everything slow (scanning, installing, re-checking) one job at a time.

An engine is reported only once it is installed and seen to run, or while it is being
installed or has failed to (so the control plane can say why a node cannot take a model),
or when agent.yaml names it. Nothing is ever reported because it is on PATH.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import httpx

from ..collectors import CommandRunner, Roots, make_runner
from ..config import AgentConfig, ConfiguredEngine
from .host import HostFacts, host_facts
from .installer import (
    Installed,
    InstallError,
    InstallLimits,
    demote,
    install,
    install_from_package,
    installed_folders,
    recheck,
)
from .packages import package_manager
from .platform import (
    NoBuildError,
    choose_build,
    cpu_warnings,
    cuda_fallback_note,
    driver_version,
)
from .spec import PACKAGE, EngineSpec
from .verify import VerifyError, local_runner, parse_any_version, run_version

log = logging.getLogger("llmgw_agent.engines")

Status = Literal["installed", "installing", "failed"]
# "An unrelated upgrade can remove a library": how often an installed engine is re-checked,
# and how long a failed install waits before it is tried again.
RECHECK_S = 600.0
RETRY_S = 600.0
HISTORY = 200  # one download is ~100 messages (a percent each)
# pip's own words for one step going on: "Building wheel for x (pyproject.toml): started",
# then "...: still running..." once a minute. The same step, whichever it says.
_UNDERWAY = re.compile(r":\s*(started|still running\.*)\s*$")


def _step(message: str) -> str:
    return _UNDERWAY.sub("", message)


def took(seconds: float) -> str:
    """45 s, 7 min 12 s, 1 h 3 min: how long, as a person reads it."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


@dataclass
class EngineState:
    name: str
    version: str | None
    status: Status
    message: str
    path: str | None = None
    platform: str | None = None
    sha256: str | None = None
    folder: Path | None = None
    checked_at: float | None = None  # when it was last seen to run
    failed_at: float | None = None
    history: list[str] = field(default_factory=list)
    # While installing: when the install began, and when its current step did.
    started_at: float | None = None
    step_at: float | None = None

    def as_payload(self, now: float | None = None) -> dict[str, Any]:
        message = self.message
        if self.status == "installing" and now is not None and self.started_at is not None:
            # pip says "still running..." for the whole of a ten-minute build: the
            # times say whether it moves, and for how long this step has gone on.
            on_step = now - (self.step_at if self.step_at is not None else self.started_at)
            message += f" (this step {took(on_step)}; installing for {took(now - self.started_at)})"
        return {
            "name": self.name,
            "version": self.version,
            "status": self.status,
            "message": message,
            "path": self.path,
        }

    def status_line(self) -> str:
        """As a person reads it: "installing: downloading llama-b11434-... (16 MB, 42%)"."""
        return f"{self.status}: {self.message}"


Job = Callable[[], None]


class NotHere(NoBuildError):
    """The engine is not for this node (no NVIDIA driver for a CUDA-only package)."""


def _digest(spec: EngineSpec, choice: str) -> str | None:
    """What the installed build was checked against: a new one means install again."""
    if choice == PACKAGE:
        return spec.package.sha256 if spec.package is not None else None
    build = spec.builds.get(choice)
    return build.sha256 if build is not None else None


class EngineManager:
    def __init__(
        self,
        *,
        engines_dir: Path,
        host: HostFacts,
        run_packages: CommandRunner | None = None,
        run_local: CommandRunner | None = None,
        configured: Sequence[ConfiguredEngine] = (),
        recheck_s: float = RECHECK_S,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
        client: httpx.Client | None = None,
        limits: InstallLimits | None = None,
    ) -> None:
        self.engines_dir = engines_dir
        self.host = host
        self.limits = limits or InstallLimits()
        self.run_packages = run_packages
        self.run_local = run_local or local_runner(self.limits.version_s)
        self.package_manager = package_manager(host.os_id, host.os_like)
        self.configured = {c.name: c for c in configured}
        self.recheck_s, self.retry_s, self.clock = recheck_s, retry_s, clock
        self.client = client
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._desired: list[EngineSpec] = []
        self._choices: dict[tuple[str, str], str | NoBuildError] = {}
        # Installed-by-us and desired engines by (name, version, platform); configured by name.
        self._states: dict[tuple[str, str, str], EngineState] = {}
        self._configured: dict[str, EngineState] = {}
        self._scanned = False
        self._notes: dict[tuple[str, str], str] = {}

    @classmethod
    def from_config(cls, config: AgentConfig, roots: Roots, **kw: Any) -> EngineManager:
        kw.setdefault("run_packages", make_runner(config.command_wrapper, timeout_s=900))
        kw.setdefault(
            "limits", InstallLimits(unpacked_bytes=int(config.engines_max_unpacked_gib * 2**30))
        )
        return cls(
            engines_dir=config.engines_dir, host=host_facts(roots), configured=config.engines, **kw
        )

    # -- what the main loop calls ------------------------------------------------------

    def heartbeat(self, desired: Sequence[EngineSpec | Mapping[str, Any]]) -> dict[str, Any]:
        self.converge(desired)
        return self.report()

    def converge(self, desired: Sequence[EngineSpec | Mapping[str, Any]]) -> None:
        """Record what is wanted and wake the worker; returns at once."""
        specs = [EngineSpec.parse(d) for d in desired]
        with self._lock:
            before = {(d.name, d.version): (d.builds, d.package) for d in self._desired}
            for spec in specs:
                key = (spec.name, spec.version)
                if key in before and before[key] != (spec.builds, spec.package):
                    # The control plane offers other builds now (a mirror was
                    # added): choose again at once rather than waiting out
                    # the retry interval of a choice made on the old offer.
                    self._choices.pop(key, None)
                    self._states.pop((spec.name, spec.version, ""), None)
            self._desired = specs
            if self._worker is None and not self._stop.is_set() and self._next_job() is not None:
                self._worker = threading.Thread(
                    target=self._work, name="llmgw-engines", daemon=True
                )
                self._worker.start()

    def report(self) -> dict[str, Any]:
        """{"engines": [...], "engines_probed": bool, "warnings": [...]} for the heartbeat."""
        with self._lock:
            now = self.clock()
            wanted = {(s.name, s.version): s for s in self._desired}
            entries = []
            for (name, version, platform), state in sorted(self._states.items()):
                choice = self._choices.get((name, version))
                # A build of a wanted version for another platform is superseded, not offered.
                if (name, version) in wanted and isinstance(choice, str) and choice != platform:
                    continue
                entries.append(state.as_payload(now))
            if self._scanned:
                for spec in self._desired:
                    if not self._has_state(spec):
                        entries.append(
                            {
                                "name": spec.name,
                                "version": spec.version,
                                "status": "installing",
                                "message": "waiting to install",
                                "path": None,
                            }
                        )
            entries += [s.as_payload() for _, s in sorted(self._configured.items())]
            warnings = cpu_warnings(self.host.arch, self.host.cpu_flags)
            warnings += [self._notes[k] for k in sorted(self._notes) if k in wanted]
            return {"engines": entries, "engines_probed": self._scanned, "warnings": warnings}

    def wait(self, timeout: float | None = None) -> bool:
        """Until the worker has nothing left to do (tests; shutdown). True when idle."""
        with self._lock:
            worker = self._worker
        if worker is not None:
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.wait(timeout)

    def state(self, name: str, version: str) -> EngineState | None:
        """The state of the build this node wants of `name` `version` (a copy)."""
        with self._lock:
            choice = self._choices.get((name, version))
            platform = choice if isinstance(choice, str) else ""
            state = self._states.get((name, version, platform))
            return replace(state, history=list(state.history)) if state else None

    # -- the worker ----------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                job = None if self._stop.is_set() else self._next_job()
                if job is None:
                    self._worker = None
                    return
            try:
                job()
            except Exception:  # noqa: BLE001 - one bad job must not end the worker
                log.exception("engine job failed")

    def _has_state(self, spec: EngineSpec) -> bool:
        choice = self._choices.get((spec.name, spec.version))
        if isinstance(choice, NoBuildError):
            return True
        return isinstance(choice, str) and (spec.name, spec.version, choice) in self._states

    def _due(self, at: float | None, every: float) -> bool:
        return at is None or self.clock() - at >= every

    def _next_job(self) -> Job | None:
        """The next thing to do, under the lock; None when the node has converged."""
        if not self._scanned:
            return self._scan
        for name, configured in sorted(self._configured.items()):
            ok = configured.status == "installed"
            if self._due(configured.checked_at if ok else configured.failed_at, self.recheck_s):
                return partial(self._check_configured, name)
        for spec in self._desired:
            if (spec.name, spec.version) not in self._choices:
                self._choose(spec)
            choice = self._choices[(spec.name, spec.version)]
            if isinstance(choice, NoBuildError):
                continue
            wanted = self._states.get((spec.name, spec.version, choice))
            if wanted is None or (
                wanted.status == "installed" and wanted.sha256 != _digest(spec, choice)
            ):
                return partial(self._install, spec, choice)
            if wanted.status == "failed" and self._due(wanted.failed_at, self.retry_s):
                return partial(self._install, spec, choice)
        for key, state in sorted(self._states.items()):
            if state.status == "installed" and self._due(state.checked_at, self.recheck_s):
                return partial(self._recheck, key)
        return None

    def _choose(self, spec: EngineSpec) -> None:
        key = (spec.name, spec.version)
        host = self.host
        try:
            if spec.binary is None:
                # Not an engine the agent unpacks (vLLM, SGLang): its package, if any.
                raise NoBuildError(
                    f"{spec.name} is not installed from an archive: give it a package: "
                    "in server.yaml, or name it under engines: in agent.yaml"
                )
            platform = choose_build(
                spec.builds, host.arch, host.nvidia_driver, host.os_id, host.os_like
            )
        except NoBuildError as exc:
            package = spec.package
            if package is not None and package.needs == "nvidia":
                if driver_version(host.nvidia_driver) is None:
                    # Not this node's engine (vLLM, SGLang on a CPU node): nothing to
                    # install and nothing to report, rather than a failure on every node.
                    self._choices[key] = NotHere(f"{spec.name} needs an NVIDIA GPU")
                    return
            if package is None:
                self._choices[key] = exc
                self._states[(spec.name, spec.version, "")] = EngineState(
                    spec.name, spec.version, "failed", str(exc), failed_at=self.clock()
                )
                return
            platform = PACKAGE
        self._choices[key] = platform
        note = cuda_fallback_note(spec.builds, platform, host.arch, host.nvidia_driver)
        if note:
            self._notes[key] = f"{spec.name} {spec.version}: {note}"

    def _set(self, key: tuple[str, str, str], **changes: Any) -> None:
        with self._lock:
            state = self._states.get(key)
            if state is None:
                state = self._states[key] = EngineState(key[0], key[1], "installing", "")
            if "message" in changes and "step_at" not in changes:
                if _step(changes["message"]) != _step(state.message):
                    state.step_at = self.clock()
            for k, v in changes.items():
                setattr(state, k, v)
            if "message" in changes:
                state.history = [*state.history, changes["message"]][-HISTORY:]

    def _scan(self) -> None:
        """At start: what earlier runs installed, re-verified; the configured engines."""
        for folder in installed_folders(self.engines_dir):
            try:
                found = recheck(folder, self.run_local)
            except InstallError as exc:
                log.warning("%s no longer runs, demoted: %s", folder, exc)
                demote(folder)
                continue
            self._set(self._key(found), **self._installed(found))
        for name in sorted(self.configured):
            self._check_configured(name)
        with self._lock:
            self._scanned = True

    def _key(self, found: Installed) -> tuple[str, str, str]:
        return (found.marker.engine, found.marker.version, found.marker.platform)

    def _installed(self, found: Installed) -> dict[str, Any]:
        m = found.marker
        return {
            "status": "installed",
            "message": f"{found.binary.name} version {found.info.describe()}, {m.platform} build",
            "path": str(found.binary),
            "platform": m.platform,
            "sha256": m.sha256,
            "folder": found.folder,
            "checked_at": self.clock(),
            "failed_at": None,
        }

    def _install(self, spec: EngineSpec, platform: str) -> None:
        key = (spec.name, spec.version, platform)
        now = self.clock()
        self._set(
            key,
            status="installing",
            message="starting",
            path=None,
            platform=platform,
            started_at=now,
            step_at=now,
        )

        def progress(message: str) -> None:
            self._set(key, message=message)

        try:
            if platform == PACKAGE:
                found = install_from_package(
                    spec,
                    engines_dir=self.engines_dir,
                    run_local=self.run_local,
                    progress=progress,
                    stop=self._stop,
                    limits=self.limits,
                )
            else:
                found = install(
                    spec,
                    platform,
                    engines_dir=self.engines_dir,
                    run_local=self.run_local,
                    run_packages=self.run_packages,
                    package_manager=self.package_manager,
                    progress=progress,
                    client=self.client,
                    stop=self._stop,
                    limits=self.limits,
                )
        except Exception as exc:  # noqa: BLE001 - whatever broke, the install has ended
            # Anything escaping here would leave the engine "installing" for good: the
            # worker only retries what has failed.
            if isinstance(exc, InstallError):
                reason = str(exc)
                log.warning(
                    "install of %s %s (%s) failed: %s", spec.name, spec.version, platform, reason
                )
            else:
                reason = f"{type(exc).__name__}: {exc}"
                log.exception(
                    "install of %s %s (%s) failed unexpectedly", spec.name, spec.version, platform
                )
            self._set(key, status="failed", message=reason, failed_at=self.clock())
            if spec.package is not None and platform != PACKAGE:
                # The archive cannot be had here (no route to GitHub, say): the package
                # names the same engine, pinned as firmly.
                with self._lock:
                    self._choices[(spec.name, spec.version)] = PACKAGE
                    self._notes[(spec.name, spec.version)] = (
                        f"{spec.name} {spec.version}: the {platform} archive failed ({reason}); "
                        f"installing {spec.package.pinned} instead"
                    )
            return
        log.info("installed %s %s (%s) at %s", spec.name, spec.version, platform, found.folder)
        self._set(key, **self._installed(found))

    def _recheck(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            folder = self._states[key].folder
        if folder is None:
            return
        try:
            found = recheck(folder, self.run_local)
        except InstallError as exc:
            log.warning("%s %s no longer runs, demoted: %s", key[0], key[1], exc)
            demote(folder)
            self._set(
                key,
                status="failed",
                message=f"stopped working: {exc}",
                path=None,
                failed_at=self.clock(),
            )
            return
        self._set(key, **self._installed(found))

    def _check_configured(self, name: str) -> None:
        engine = self.configured[name]
        now = self.clock()
        state = EngineState(name, None, "failed", "", path=str(engine.path))
        if not engine.path.is_file():
            state.message = f"configured path {engine.path} does not exist"
            state.failed_at = now
        else:
            try:
                output = run_version(engine.path, self.run_local)
            except VerifyError as exc:
                state.message = str(exc)
                state.failed_at = now
            else:
                info = parse_any_version(output)
                state.version = info.version if info else None
                state.status = "installed"
                state.message = f"named in agent.yaml; {engine.path.name} --version: " + (
                    info.describe() if info else "no version printed"
                )
                state.checked_at = now
        with self._lock:
            self._configured[name] = state
