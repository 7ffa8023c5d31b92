"""Run the shards the control plane wants on this node, and say how each one is doing.

The main loop calls `converge(desired_shards, engines)` with every heartbeat answer's
`desired.shards` (the full list: a shard missing from it is one to stop) and the engine
manager's `engines` report, and puts `report()` in every heartbeat. One background thread
does the rest: starts engines, polls their /health, restarts the ones that exit (with
exponential backoff), and stops the ones no longer wanted (SIGTERM to the group, SIGKILL
after a grace period).

Engines outlive the agent (each runs in a session of its own), so restarting or upgrading
the agent does not take models down. Every engine started is recorded (records.py); a new
supervisor takes over the recorded engines that still run (adoption.py), watches and
reports them, and once the control plane's first answer says what is wanted, keeps the
ones it still wants as they are and stops the others. It never signals a process no
record names.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..config import AgentConfig
from .adoption import adopted_shard, record_engine, still_running
from .command import (
    NotRunnable,
    advertised_host,
    build_command,
    find_engine,
    local_host,
    pick_port,
    url_for,
)
from .process import GroupMeter, ShardProcess, boot_id, same_process
from .records import EngineRecord, Records
from .shard import HISTORY, Shard, State
from .spec import ShardSpec, ShardSpecError

log = logging.getLogger("llmgw_agent.shards")


@dataclass(frozen=True)
class Timing:
    """How the supervisor paces itself; tests shorten them."""

    poll_s: float = 0.25  # the loop: exits noticed, starting/loading engines polled
    ready_check_s: float = 5.0  # /health of a ready engine
    health_timeout_s: float = 2.0
    backoff_s: float = 1.0  # first restart delay, doubled per failure in a row
    backoff_cap_s: float = 60.0
    reset_after_s: float = 300.0  # ready this long: the next failure starts over at 1 s
    grace_s: float = 15.0  # SIGTERM, then SIGKILL after this

    def backoff(self, failures: int) -> float:
        """The delay before the next start, after `failures` in a row."""
        return min(self.backoff_cap_s, self.backoff_s * 2.0 ** (failures - 1))


class ShardSupervisor:
    def __init__(
        self,
        *,
        log_dir: Path,
        serve_host: str = "127.0.0.1",
        advertise_host: str | None = None,
        configured_engines: Collection[str] = (),
        timing: Timing = Timing(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log_dir = log_dir
        self.serve_host = serve_host
        self.advertise = advertised_host(serve_host, advertise_host)
        self.health_host = local_host(serve_host)
        self.configured = frozenset(configured_engines)
        self.timing, self.clock = timing, clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shards: dict[str, Shard] = {}
        self._engines: list[Mapping[str, Any]] = []
        self._bad: dict[str, str] = {}  # shard id -> why its spec was refused
        self._forgotten: dict[str, list[str]] = {}  # the histories of stopped shards
        self._http = httpx.Client(timeout=timing.health_timeout_s, trust_env=False)
        self._records = Records(log_dir / "running")
        self._boot = boot_id()
        # Until the control plane has said what it wants, nothing is started or stopped.
        self._desired_known = False
        self._take_over()

    @classmethod
    def from_config(cls, config: AgentConfig, **kw: Any) -> ShardSupervisor:
        kw.setdefault("log_dir", config.engines_dir.parent / "shards")
        return cls(
            serve_host=config.serve_host,
            advertise_host=config.advertise_host,
            configured_engines=[e.name for e in config.engines],
            **kw,
        )

    # -- what the main loop calls ------------------------------------------------------

    def converge(
        self,
        desired: Sequence[ShardSpec | Mapping[str, Any]] | None,
        engines: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Record the shards wanted (all of them) and what the engine manager reports.

        `desired` None: not known yet (no answer from the control plane since the agent
        started); the engines taken over from an earlier agent keep running meanwhile.
        """
        if desired is None:
            with self._lock:
                self._engines = [dict(e) for e in engines]
                self._start_thread()
            self._wake.set()
            return
        specs: dict[str, ShardSpec] = {}
        bad: dict[str, str] = {}
        for raw in desired:
            try:
                spec = ShardSpec.parse(raw)
            except ShardSpecError as exc:
                shard_id = raw.get("id") if isinstance(raw, Mapping) else None
                log.warning("refusing a desired shard: %s", exc)
                if isinstance(shard_id, str) and shard_id:
                    bad[shard_id] = str(exc)
                continue
            specs[spec.id] = spec
        with self._lock:
            self._engines = [dict(e) for e in engines]
            self._bad = bad
            self._desired_known = True
            for shard_id, spec in specs.items():
                shard = self._shards.get(shard_id)
                if shard is None:
                    self._shards[shard_id] = Shard(spec)
                    continue
                if shard.adopted:
                    self._claim(shard, spec)
                shard.spec, shard.wanted = spec, True
            for shard_id, shard in self._shards.items():
                shard.adopted = False
                if shard_id not in specs:
                    shard.wanted = False
            self._start_thread()
        self._wake.set()

    def _start_thread(self) -> None:
        if self._thread is None and self._shards and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="llmgw-shards", daemon=True)
            self._thread.start()

    def _claim(self, shard: Shard, spec: ShardSpec) -> None:
        """An engine taken over is kept only when it runs exactly the shard wanted now."""
        if spec.generation != shard.spec.generation:
            return  # restarted for the new generation, as any running engine is
        changed = [
            f.name
            for f in dataclasses.fields(ShardSpec)
            if getattr(spec, f.name) != getattr(shard.spec, f.name)
        ]
        if changed and shard.restart_why is None:
            shard.restart_why = f"restarting: {', '.join(changed)} changed since it was started"

    def report(self) -> list[dict[str, Any]]:
        """Every shard the agent knows (wanted or stopping), as the heartbeat's `shards`."""
        with self._lock:
            rows = [(self._entry(s), s.meter) for _, s in sorted(self._shards.items())]
            refused = [
                {"id": i, "replica": None, "state": "failed", "url": None, "pid": None,
                 "restarts": 0, "generation": None, "message": f"refused: {m}",
                 "since": None}
                for i, m in sorted(self._bad.items()) if i not in self._shards
            ]  # fmt: skip
        for entry, meter in rows:
            if meter is not None and entry["pid"] is not None:
                cores, memory = meter.sample()
                # Absent, not 0, when nothing could be measured.
                if cores is not None:
                    entry["cpu_cores"] = round(cores, 3)
                if memory is not None:
                    entry["memory_bytes"] = memory
        return [entry for entry, _ in rows] + refused

    def history(self, shard_id: str) -> list[str]:
        """Every state the shard went through, "state: message" (tests; diagnosis)."""
        with self._lock:
            shard = self._shards.get(shard_id)
            return list(shard.history) if shard else list(self._forgotten.get(shard_id, []))

    def close(self, grace_s: float | None = None, *, stop_engines: bool = True) -> None:
        """Stop the loop, and every shard (SIGTERM to each group, SIGKILL after the grace).

        `stop_engines=False` leaves the engines running, and recorded, for the next agent
        to take over; only the ones already on their way out (stopping) are stopped. Engines
        taken over before any desired state came are never stopped here: this agent never
        learnt whether they are wanted (`llmgw-agent --once` beside a running agent).
        """
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        grace = self.timing.grace_s if grace_s is None else grace_s
        with self._lock:
            stopping = [
                s
                for s in self._shards.values()
                if s.proc is not None
                and s.proc.poll() is None
                and (s.state == "stopping" or (stop_engines and not s.adopted))
            ]
            left = [s for s in self._shards.values() if s.proc is not None and s not in stopping]
            procs = [s.proc for s in stopping if s.proc is not None]
            for shard in stopping:
                if shard.state != "stopping":
                    shard.set("stopping", "the agent is stopping")
        for shard in left:
            log.info(
                "shard %s: leaving pid %s running", shard.spec.id, shard.proc and shard.proc.pid
            )
        for proc in procs:
            proc.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.group_alive() for p in procs):
            time.sleep(0.05)
        for proc in procs:
            if proc.group_alive():
                log.warning("shard process group %d ignored SIGTERM; killing it", proc.pid)
                proc.signal_group(signal.SIGKILL)
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - shutting down; reaped by init at worst
                pass
        with self._lock:
            for shard in stopping:
                self._records.remove(shard.spec.id)
            self._shards.clear()
        self._http.close()

    # -- the loop ----------------------------------------------------------------------

    def _entry(self, s: Shard) -> dict[str, Any]:
        running = s.proc is not None and s.proc.ended is None
        return {
            "id": s.spec.id,
            "replica": s.spec.replica,
            "state": s.state,
            "url": url_for(self.advertise, s.port) if s.port is not None else None,
            "pid": s.proc.pid if running and s.proc else None,
            "restarts": s.restarts,
            "generation": s.proc.generation if s.proc else s.spec.generation,
            "message": s.message,
            "since": s.since,
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - one bad tick must not end supervision
                log.exception("shard supervision failed")
            self._wake.wait(self.timing.poll_s)
            self._wake.clear()

    def _tick(self) -> None:
        checks: list[tuple[Shard, ShardProcess, str]] = []
        with self._lock:
            now = self.clock()
            for shard_id, shard in list(self._shards.items()):
                if self._step(shard, now):
                    del self._shards[shard_id]
                    self._forgotten.pop(shard_id, None)
                    self._forgotten[shard_id] = [*shard.history, "stopped"]
                    while len(self._forgotten) > HISTORY:
                        del self._forgotten[next(iter(self._forgotten))]
                    continue
                proc = shard.proc
                if (
                    proc is not None
                    and shard.state in ("starting", "loading", "ready")
                    and now >= shard.health_due
                ):
                    checks.append((shard, proc, f"{url_for(self.health_host, shard.port or 0)}"))
        # Outside the lock: a slow engine must not hold up a heartbeat's report.
        results = [(shard, proc, self._health(url)) for shard, proc, url in checks]
        with self._lock:
            now = self.clock()
            for shard, proc, (state, message) in results:
                if shard.proc is proc and proc.ended is None and shard.state != "stopping":
                    self._apply_health(shard, state, message, now)

    def _health(self, base: str) -> tuple[State, str]:
        try:
            answer = self._http.get(f"{base}/health")
        except httpx.HTTPError as exc:
            return "starting", f"not answering /health yet ({type(exc).__name__})"
        if answer.status_code == 200:
            return "ready", ""
        if answer.status_code == 503:
            return "loading", "loading the model"
        return "starting", f"/health answered {answer.status_code}"

    def _apply_health(self, shard: Shard, state: State, message: str, now: float) -> None:
        t = self.timing
        if state == "ready":
            shard.ready_at = shard.ready_at if shard.ready_at is not None else now
            if now - shard.ready_at >= t.reset_after_s:
                shard.failures = 0
            shard.health_due = now + t.ready_check_s
            shard.set("ready", "")
            return
        shard.ready_at = None
        shard.health_due = now + t.poll_s
        if shard.last_failure and shard.restarts:
            message = f"{message}; restart {shard.restarts} after: {shard.last_failure}"
        shard.set(state, message)

    def _step(self, shard: Shard, now: float) -> bool:
        """Move one shard along; True when it is gone and should be forgotten."""
        proc = shard.proc
        if proc is not None:
            ended = proc.poll()
            if ended is None:
                self._step_running(shard, proc, now)
                return False
            self._exited(shard, proc, ended, now)
        if not shard.wanted:
            return True
        if not self._desired_known:
            return False
        if shard.state == "failed" and shard.retry_at is not None and now < shard.retry_at:
            return False
        self._start(shard, now)
        return False

    def _step_running(self, shard: Shard, proc: ShardProcess, now: float) -> None:
        if shard.state == "stopping":
            if shard.stop_deadline is not None and now >= shard.stop_deadline and not shard.killed:
                log.warning("shard %s ignored SIGTERM for %g s; killing its group",
                            shard.spec.id, self.timing.grace_s)  # fmt: skip
                proc.signal_group(signal.SIGKILL)
                shard.killed = True
                shard.set("stopping", f"{shard.message}; ignored SIGTERM, killed")
            return
        if not shard.wanted:
            self._begin_stop(shard, proc, now, "no longer wanted")
        elif shard.spec.generation != proc.generation:
            why = f"restarting for generation {shard.spec.generation} (was {proc.generation})"
            self._begin_stop(shard, proc, now, why)
        elif shard.restart_why and self._desired_known:
            self._begin_stop(shard, proc, now, shard.restart_why)

    def _begin_stop(self, shard: Shard, proc: ShardProcess, now: float, why: str) -> None:
        proc.signal_group(signal.SIGTERM)
        shard.stop_deadline = now + self.timing.grace_s
        shard.killed = False
        shard.set("stopping", why)

    def _exited(self, shard: Shard, proc: ShardProcess, ended: str, now: float) -> None:
        # Whatever the leader left behind in its group (workers holding GPU memory) goes too.
        if proc.group_alive():
            proc.signal_group(signal.SIGKILL)
        shard.proc, shard.meter, shard.ready_at = None, None, None
        self._records.remove(shard.spec.id)
        if shard.state == "stopping":
            if shard.wanted:  # a new generation: start at once, counted afresh
                shard.restarts = shard.failures = 0
                shard.last_failure = ""
                new = shard.spec.generation != proc.generation or not shard.restart_why
                shard.restart_why = None
                shard.set("pending", "starting the new generation" if new else "starting again")
            return
        shard.failures += 1
        delay = self.timing.backoff(shard.failures)
        shard.retry_at = now + delay
        tail = proc.tail()
        why = ended
        shard.last_failure = f"{why}: {tail}" if tail else why
        log.warning("shard %s %s; restarting in %g s", shard.spec.id, why, delay)
        shard.set("failed", f"{shard.last_failure} (restarting in {delay:g} s)")

    def _start(self, shard: Shard, now: float) -> None:
        spec = shard.spec
        try:
            engine = find_engine(spec, self._engines, self.configured)
            # Checked before a port is taken: a pending shard is retried every poll.
            build_command(spec, engine, self.serve_host, 0)
            port = pick_port(
                self.serve_host,
                prefer=shard.port,
                taken={s.port for s in self._shards.values() if s.port and s is not shard},
            )
            command = build_command(spec, engine, self.serve_host, port)
        except NotRunnable as exc:
            shard.retry_at = None
            shard.set(exc.state, exc.message)
            return
        try:
            proc = ShardProcess.spawn(
                command.argv, command.env, self._log_path(spec.id), spec.generation
            )
        except OSError as exc:
            shard.failures += 1
            delay = self.timing.backoff(shard.failures)
            shard.retry_at = now + delay
            shard.last_failure = f"cannot start {command.argv[0]}: {exc.strerror or exc}"
            shard.set("failed", f"{shard.last_failure} (retrying in {delay:g} s)")
            return
        if shard.failures:
            shard.restarts += 1
        shard.proc, shard.port = proc, port
        shard.meter = GroupMeter(proc.pid, proc.started)
        shard.retry_at, shard.stop_deadline, shard.killed = None, None, False
        shard.health_due = now
        shard.restart_why = None
        log.info("shard %s: started pid %d: %s", spec.id, proc.pid, " ".join(command.argv))
        record_engine(
            self._records, self._boot, self.serve_host, spec, proc, port, engine, command.env
        )
        message = "started"
        if shard.last_failure and shard.restarts:
            message = f"restart {shard.restarts} after: {shard.last_failure}"
        shard.set("starting", message)

    def _log_path(self, shard_id: str) -> Path:
        return self.log_dir / f"{re.sub(r'[^A-Za-z0-9._-]', '_', shard_id)}.log"

    # -- engines that outlive the agent -------------------------------------------------

    def _take_over(self) -> None:
        """Adopt the recorded engines still running; forget the records of the others."""
        now = self.clock()
        for record in still_running(self._records, self._boot, self.log_dir):
            self._adopt(record, now)

    def _adopt(self, record: EngineRecord, now: float) -> None:
        shard = adopted_shard(record, self.serve_host)
        self._shards[record.shard] = shard
        # Checked now, not on the loop's first turn: the first heartbeat already says ready.
        state, message = self._health(url_for(self.health_host, record.port))
        if same_process(record.pid, record.start_time):
            self._apply_health(shard, state, message, now)
