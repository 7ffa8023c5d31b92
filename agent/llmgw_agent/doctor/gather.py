"""What doctor looks at: read from this node (through the collectors' roots and runner)
and asked of the control plane. Every reading that fails says why, so its check can
answer unknown with the reason instead of ok."""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from ..collectors import Roots
from ..collectors.ib import fabric_of
from ..collectors.ib_sysfs import ib_class, read_ports
from ..collectors.mounts import existing_dirs, mount_table
from ..collectors.sm import _run, parse_sminfo, parse_smir
from ..collectors.weights import find_models

RECORD = "/api/agent/v1/record"


@dataclass
class ControlPlane:
    """The control plane's answers; `status` None when none came."""

    status: int | None = None
    said: str = ""
    record: dict[str, Any] | None = None
    offset_s: float | None = None
    rtt_s: float = 0.0
    have_credential: bool = True


@dataclass
class Facts:
    node: str = ""
    ports: list[dict[str, Any]] | None = None
    ports_why: str = ""
    declared: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fabric_of: dict[str, str | None] = field(default_factory=dict)
    masters: dict[str, dict[str, Any] | None] | None = None
    managers: dict[str, list[dict[str, Any]] | None] = field(default_factory=dict)
    gpus: list[dict[str, Any]] | None = None
    gpus_why: str = ""
    imex: dict[str, Any] | None = None
    engines: list[dict[str, Any]] | None = None
    engines_why: str = ""
    filesystems: list[dict[str, Any]] | None = None
    held: list[dict[str, Any]] = field(default_factory=list)
    cp: ControlPlane = field(default_factory=ControlPlane)


def read_ib(roots: Roots, facts: Facts) -> None:
    try:
        ports = read_ports(roots.sys)
    except OSError as exc:
        facts.ports_why = f"{type(exc).__name__}: {exc}"
        return
    if not ports and not ib_class(roots.sys).is_dir():
        facts.ports = []
        return
    facts.ports = [p.as_dict() for p in ports]
    facts.fabric_of = {p.key: fabric_of(p, roots.fabrics) for p in ports}
    facts.declared = dict(roots.fabrics)
    masters: dict[str, dict[str, Any] | None] = {}
    for p in ports:
        if not (p.infiniband and p.phys_state == "LinkUp"):
            continue
        result = _run(roots, ["sminfo", "-C", p.device, "-P", str(p.port)])
        if result is None:
            return  # sminfo not installed: masters stays None, said as unknown
        master = parse_sminfo(result.stdout) if result.returncode == 0 else None
        masters[p.key] = master
        if master is not None and master["guid"] not in facts.managers:
            listed = _run(roots, ["saquery", "-C", p.device, "-P", str(p.port), "SMIR"])
            ok = listed is not None and listed.returncode == 0
            facts.managers[master["guid"]] = parse_smir(listed.stdout) if ok and listed else None
    facts.masters = masters


def read_gpus(roots: Roots, facts: Facts) -> None:
    from ..collectors.gpu import collect_inventory

    try:
        data = collect_inventory(roots)
    except Exception as exc:  # noqa: BLE001 - a broken driver is a finding, not a crash
        facts.gpus_why = f"{type(exc).__name__}: {exc}"[:300]
        return
    facts.gpus = data.get("gpus") or []
    facts.imex = data.get("imex")


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(top, name)).st_size  # follows HF's blob links
            except OSError:
                continue
    return total


def read_room(roots: Roots, facts: Facts) -> None:
    from ..collectors.filesystems import collect_filesystems

    if not existing_dirs(roots.model_dirs):
        return
    facts.filesystems = collect_filesystems(roots).get("filesystems")
    try:
        table = mount_table(roots)
    except OSError:
        table = None
    for d in existing_dirs(roots.model_dirs):
        for m in find_models(d, table):
            facts.held.append({**m, "size_bytes": _size(m["path"])})


def read_engines(engines_dir: Path, configured: Sequence[tuple[str, Path]], facts: Facts) -> None:
    from ..engines.installer import InstallError, installed_folders, recheck
    from ..engines.verify import (
        VerifyError,
        local_runner,
        parse_any_version,
        pinned_by,
        run_version,
    )

    run = local_runner()
    found: list[dict[str, Any]] = []
    for folder in installed_folders(engines_dir):
        try:
            got = recheck(folder, run)
        except InstallError as exc:
            found.append(
                {"name": folder.name, "path": str(folder), "ok": False, "message": str(exc)}
            )
        else:
            why = pinned_by(got.info, got.marker.version)
            found.append({"name": got.marker.engine, "version": got.marker.version,
                          "path": str(got.binary), "ok": True,
                          "message": f"--version: {got.info.describe()}"
                                     + (f" ({why})" if why else "")})  # fmt: skip
    for name, path in configured:
        try:
            out = run_version(path, run)
        except VerifyError as exc:
            found.append({"name": name, "path": str(path), "ok": False, "message": str(exc)})
        else:
            info = parse_any_version(out)
            found.append({"name": name, "path": str(path), "ok": True,
                          "version": info.version if info else None,
                          "message": f"--version: {info.describe() if info else 'runs'}"})  # fmt: skip
    facts.engines = found


def _server_time(answer: Mapping[str, Any] | None, date: str | None) -> float | None:
    if answer and isinstance(answer.get("time"), str):
        return datetime.fromisoformat(answer["time"]).timestamp()
    if date:
        # Date is whole seconds, truncated: the middle of that second is the best guess.
        return email.utils.parsedate_to_datetime(date).timestamp() + 0.5
    return None


def _ask(http: httpx.Client, url: str, credential: str, clock: Callable[[], float]) -> ControlPlane:
    t0 = clock()
    r = http.get(url.rstrip("/") + RECORD, headers={"Authorization": f"Node {credential}"})
    t1 = clock()
    try:
        answer = r.json()
    except ValueError:
        answer = None
    body = answer if isinstance(answer, dict) else None
    there = _server_time(body if r.status_code == 200 else None, r.headers.get("date"))
    cp = ControlPlane(
        status=r.status_code, said=str(body.get("errors", "") if body else r.text[:200])
    )
    cp.offset_s = None if there is None else there - (t0 + t1) / 2
    cp.rtt_s = t1 - t0
    cp.record = body if r.status_code == 200 else None
    return cp


def ask_control_plane(
    urls: Sequence[str],
    credential: str | None,
    ca_file: Path | None = None,
    clock: Callable[[], float] = time.time,
    timeout_s: float = 10.0,
    samples: int = 3,
) -> ControlPlane:
    """This node's record, read with its credential from the first URL that answers.

    Read a few times, keeping the quickest answer's clock offset: the server's time falls
    somewhere within the round trip, and the first request (a connection, a cold
    process) is the slowest and least certain.
    """
    if credential is None:
        return ControlPlane(have_credential=False, said="the credential file is missing or empty")
    errors = []
    verify: str | bool = str(ca_file) if ca_file is not None else True
    with httpx.Client(timeout=timeout_s, verify=verify) as http:
        for url in urls:
            try:
                best = _ask(http, url, credential, clock)
                for _ in range(samples - 1 if best.status == 200 else 0):
                    again = _ask(http, url, credential, clock)
                    if again.status == 200 and again.rtt_s < best.rtt_s:
                        best = again
            except httpx.HTTPError as exc:
                errors.append(f"{url}: {type(exc).__name__}: {exc}")
                continue
            return best
    return ControlPlane(said="; ".join(errors)[:500] or "no control-plane URL")
