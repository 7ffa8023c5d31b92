"""InfiniBand checks: every port, the subnet manager each port sees, and fabric identity.

Pure over what the collectors read (ports as `Port.as_dict()`, each port's master from
`sminfo`, each fabric's managers from `saquery SMIR`) and the control plane's record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .result import FAIL, OK, UNKNOWN, WARN, Check, worst

Port = Mapping[str, Any]

NO_SM = (
    "no subnet manager configured this port: start opensm on one node or switch of this "
    "fabric (systemctl start opensm), or check that the switch's SM is enabled"
)


def _key(p: Port) -> str:
    return f"{p.get('device')}/{p.get('port')}"


def _absent(name: str, ports: Sequence[Port] | None, why: str) -> Check | None:
    if ports is None:
        return Check(name, UNKNOWN, f"could not read the RDMA ports: {why}",
                     "run doctor as root, or set proc_root/sys_root in agent.yaml")  # fmt: skip
    if not ports:
        return Check(name, UNKNOWN, "not present: no InfiniBand/RoCE adapter on this node",
                     "nothing to do unless this node should be on a fabric")  # fmt: skip
    return None


def _port_problem(p: Port, declared: bool) -> tuple[str, str, str] | None:
    """(result, seen, what to do) for one port, or None when it is up and configured."""
    phys, state = p.get("phys_state"), p.get("state")
    if phys != "LinkUp":
        result = FAIL if declared else WARN
        return (result, f"{_key(p)} physical state {phys or 'unknown'} (state {state})",
                f"{_key(p)}: no link: check the cable and the switch port "
                "(ibportstate, mlxlink -d <dev>); reseat or replace the cable")  # fmt: skip
    if p.get("link_layer") == "InfiniBand" and state in ("INIT", "ARMED"):
        return (FAIL if declared else WARN, f"{_key(p)} LinkUp but {state}", NO_SM)
    if state != "ACTIVE":
        return (WARN, f"{_key(p)} state {state}", f"{_key(p)}: ibstat; check the switch")
    return None


def _short(up: Sequence[Port], declared: Mapping[str, str | None]) -> list[tuple[str, str, str]]:
    """Ports slower than the best of their declared fabric.

    Only within one fabric: a node's front-end NIC (100 Gb/s) beside its 400 Gb/s rails
    is how it was built, not a cable that trained short.
    """
    out = []
    for fab in sorted({f for f in declared.values() if f is not None}):
        same = [p for p in up if declared.get(_key(p)) == fab and p.get("rate_gbps")]
        best = max((float(p["rate_gbps"]) for p in same), default=0.0)
        for p in same:
            if float(p["rate_gbps"]) < best:
                out.append((WARN, f"{_key(p)} at {float(p['rate_gbps']):g} Gb/s, others in {fab} "
                            f"{best:g}", f"{_key(p)}: trained short: mlxlink -d {p.get('device')} "
                            "-m; reseat or replace the cable or transceiver"))  # fmt: skip
    return out


def _against_record(
    ports: Sequence[Port], record: Mapping[str, Any] | None, record_error: str
) -> tuple[list[tuple[str, str, str]], str]:
    """(findings, what was said) of the ports seen here against the control plane's record:
    a port it has no record of, or records in another state, is one placement and the
    console do not see as this node does."""
    if record is None:
        return [], f"not compared with the control plane's record ({record_error or 'unknown'})"
    recorded = {_key(p): p for p in record.get("ports") or []}
    found: list[tuple[str, str, str]] = []
    unheard = [_key(p) for p in ports if _key(p) not in recorded]
    report = ("the agent reports its ports with each heartbeat: is llmgw-agent running "
              "(systemctl status llmgw-agent) and its log free of refused heartbeats?")  # fmt: skip
    if unheard:
        found.append((WARN, f"the control plane has no record of {', '.join(unheard)}", report))
    for p in ports:
        was = recorded.get(_key(p))
        if was is not None and (was.get("state"), was.get("phys_state")) != (
            p.get("state"),
            p.get("phys_state"),
        ):
            found.append((WARN, f"{_key(p)} recorded {was.get('state')}/{was.get('phys_state')}, "
                          f"sees {p.get('state')}/{p.get('phys_state')}", report))  # fmt: skip
    gone = sorted(set(recorded) - {_key(p) for p in ports})
    if gone:
        found.append((WARN, f"the control plane records {', '.join(gone)}, not seen here", report))
    return found, "" if found else "the control plane's record agrees"


def ib_ports(
    ports: Sequence[Port] | None,
    declared: Mapping[str, str | None] | None = None,
    why: str = "",
    record: Mapping[str, Any] | None = None,
    record_error: str = "",
) -> Check:
    """Every port's state and physical state, its rate against the others' best, and the
    same ports as the control plane recorded them (`record`, None when it was not asked or
    did not answer: `record_error` says why).

    `declared`: port key -> declared fabric; a down port a fabric needs fails, a spare warns.
    """
    name = "ib ports"
    absent = _absent(name, ports, why)
    if absent is not None or ports is None:
        return absent or Check(name, UNKNOWN, why)
    declared = declared or {}
    found: list[tuple[str, str, str]] = []
    for p in ports:
        problem = _port_problem(p, declared.get(_key(p)) is not None)
        if problem is not None:
            found.append(problem)
    up = [p for p in ports if p.get("state") == "ACTIVE" and p.get("phys_state") == "LinkUp"]
    found.extend(_short(up, declared))
    differ, said = _against_record(ports, record, record_error)
    found.extend(differ)
    summary = f"{len(up)}/{len(ports)} ports ACTIVE/LinkUp"
    if not found:
        rates = sorted({f"{float(p['rate_gbps']):g}" for p in up if p.get("rate_gbps")})
        return Check(name, OK, f"{summary}, rate {'/'.join(rates) or '?'} Gb/s; {said}")
    return Check(
        name,
        worst([r for r, _, _ in found]),
        "; ".join([summary, *(seen for _, seen, _ in found), *([said] if said else [])]),
        "; ".join(dict.fromkeys(a for _, _, a in found)),
    )
