"""The subnet managers each active InfiniBand port sees, once a minute.

Two separate fabrics given one name in agent.yaml would have a replica spread across both,
hanging on its first collective. Every port of one fabric sees the same master subnet
manager and ports on separate fabrics cannot, so each active IB port reports its master
(`sminfo`), and one port per master lists every manager on that fabric (`saquery SMIR`):
managers listed together are one fabric (see llmgw_agent.protocol.fabric_identity).

Commands go through the runner, so agent.yaml's command_wrapper (sudo -n, nsenter) applies.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ..protocol.fabric_identity import normalize_guid
from .ib_sysfs import Port, read_ports
from .registry import CommandResult, Roots, collector

log = logging.getLogger("llmgw_agent.collectors.sm")

SAMPLE_EVERY_S = 60.0
INSTALL_EVERY_S = 3600.0
MEMO_SAMPLED_AT = "sm.sampled_at"
MEMO_SAMPLED_PORTS = "sm.sampled_ports"
MEMO_BY_PORT = "sm.by_port"
MEMO_INSTALL_AT = "sm.install_at"
MISSING_NOTICE = "installing infiniband-diags: sminfo is missing"

# SMInfo's SMState (IBA 14.4.1): sminfo prints the code and "SMINFO_<NAME>", saquery the code.
SM_STATES = {0: "NOTACTIVE", 1: "DISCOVERING", 2: "STANDBY", 3: "MASTER"}

# "sminfo: sm lid 1 sm guid 0x100001, activity count 104 priority 10 state 3 SMINFO_MASTER"
# Trap: the GUID is printed without leading zeros (0x2c90200259201): normalised to 16 digits.
_SMINFO = re.compile(
    r"sm lid (?P<lid>\d+) sm guid (?P<guid>0x[0-9a-fA-F]+), activity count \d+ "
    r"priority (?P<priority>\d+) state (?P<state>\d+)(?: SMINFO_(?P<name>\w+))?"
)
_SA_FIELD = re.compile(r"^\s*(\w+)\.{2,}\s*(\S.*?)\s*$")


def _state(code: int, name: str | None = None) -> str:
    return name.upper() if name else SM_STATES.get(code, str(code))


def parse_sminfo(text: str) -> dict[str, Any] | None:
    """{lid, guid, priority, state} of the manager `sminfo` reached; None if it printed none."""
    found: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _SMINFO.search(line)
        if m is not None:
            found = {
                "guid": normalize_guid(m.group("guid")),
                "lid": int(m.group("lid")),
                "priority": int(m.group("priority")),
                "state": _state(int(m.group("state")), m.group("name")),
            }
    return found


def parse_smir(text: str) -> list[dict[str, Any]]:
    """Every manager in `saquery SMIR` ("SMInfoRecord dump:" blocks), deduplicated by GUID."""
    records: list[dict[str, str]] = []
    for line in text.splitlines():
        if line.strip().startswith("SMInfoRecord dump"):
            records.append({})
            continue
        m = _SA_FIELD.match(line)
        if m is not None and records:
            records[-1].setdefault(m.group(1), m.group(2))
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for r in records:
        if "GUID" not in r:
            continue
        guid = normalize_guid(r["GUID"])
        if guid in seen:
            continue
        seen.add(guid)
        state = int(r["SMState"], 0) if "SMState" in r else None
        out.append(
            {
                "guid": guid,
                "lid": int(r["LID"], 0) if "LID" in r else None,
                "priority": int(r["Priority"], 0) if "Priority" in r else None,
                "state": None if state is None else _state(state),
            }
        )
    return out


def _is_missing(result: CommandResult) -> bool:
    # Through a wrapper the runner itself succeeds: env says 127, sudo "command not found".
    if result.returncode == 0:
        return False
    return result.returncode == 127 or "command not found" in result.stderr


def _run(roots: Roots, argv: list[str]) -> CommandResult | None:
    """The result, or None when the tool is not installed."""
    try:
        result = roots.run(argv)
    except FileNotFoundError:
        return None
    return None if _is_missing(result) else result


def _install_command(roots: Roots) -> list[str] | None:
    for d in ("usr/bin", "bin", "usr/sbin"):
        if (roots.rootfs / d / "apt-get").exists():
            return ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y",
                    "infiniband-diags"]  # fmt: skip
    for d in ("usr/bin", "bin"):
        if (roots.rootfs / d / "dnf").exists():
            return ["dnf", "install", "-y", "infiniband-diags"]
    return None


def _install(roots: Roots, now: float) -> list[str]:
    """Install infiniband-diags, at most once an hour; the notices to send."""
    last = roots.memo.get(MEMO_INSTALL_AT)
    if last is not None and now - last < INSTALL_EVERY_S:
        return []
    roots.memo[MEMO_INSTALL_AT] = now
    command = _install_command(roots)
    if command is None:
        notice = "cannot install infiniband-diags (sminfo is missing): no apt-get or dnf"
        log.warning(notice)
        return [notice]
    log.warning("%s; running %s", MISSING_NOTICE, " ".join(command))
    notices = [MISSING_NOTICE]
    try:
        # Under the runner's timeout: one that runs out is reported and retried in an hour.
        result = roots.run(command)
    except Exception as exc:  # noqa: BLE001 - a failed install is news, not a crash
        notices.append(f"installing infiniband-diags failed: {type(exc).__name__}: {exc}"[:1000])
    else:
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip()[-500:]
            notices.append(f"installing infiniband-diags failed: exit {result.returncode}: {tail}")
        else:
            roots.memo.pop(MEMO_SAMPLED_AT, None)  # ask the managers on the next heartbeat
    for n in notices[1:]:
        log.warning(n)
    return notices


def port_managers(roots: Roots) -> dict[str, dict[str, Any] | None]:
    """The master each port saw at the last sample, by "mlx5_0/1"; None: sminfo found none."""
    found: dict[str, dict[str, Any] | None] = roots.memo.get(MEMO_BY_PORT, {})
    return found


def _sample(roots: Roots, ports: list[Port]) -> tuple[dict[str, Any], bool]:
    """Ask every port for its master; list each master's managers once. (data, sminfo missing)"""
    by_port: dict[str, dict[str, Any] | None] = {}
    via: dict[str, Port] = {}  # master GUID -> the first port that sees it
    for port in ports:
        result = _run(roots, ["sminfo", "-C", port.device, "-P", str(port.port)])
        if result is None:
            return {}, True
        master = parse_sminfo(result.stdout) if result.returncode == 0 else None
        by_port[port.key] = master
        if master is not None:
            via.setdefault(master["guid"], port)
    listed: list[dict[str, Any]] = []
    for guid, port in via.items():
        result = _run(roots, ["saquery", "-C", port.device, "-P", str(port.port), "SMIR"])
        managers = parse_smir(result.stdout) if result and result.returncode == 0 else None
        listed.append({"port": port.key, "master": guid, "managers": managers})
    roots.memo[MEMO_BY_PORT] = by_port
    return {"subnet_managers": listed}, False


@collector("sm")
def collect(roots: Roots) -> dict[str, Any]:
    ports = [p for p in read_ports(roots.sys) if p.infiniband]
    if not ports:
        roots.memo.pop(MEMO_BY_PORT, None)
        return {}  # no InfiniBand here (RoCE has no subnet manager)
    active = [p for p in ports if p.active]
    keys = tuple(p.key for p in active)
    now = roots.clock()
    last = roots.memo.get(MEMO_SAMPLED_AT)
    # A port that came up is asked at once, not up to a minute later.
    if (
        last is not None
        and now - last < SAMPLE_EVERY_S
        and roots.memo.get(MEMO_SAMPLED_PORTS) == keys
    ):
        return {}
    if active:
        data, missing = _sample(roots, active)
    else:
        # Nothing to ask, but a node with adapters needs the tool before a port comes up.
        data, missing = {}, _run(roots, ["sminfo", "-V"]) is None
        roots.memo[MEMO_BY_PORT] = {}
    roots.memo[MEMO_SAMPLED_AT] = now
    roots.memo[MEMO_SAMPLED_PORTS] = keys
    if missing:
        roots.memo[MEMO_BY_PORT] = {}
        notices = _install(roots, now)
        if notices:
            data["notices"] = notices
    return data
