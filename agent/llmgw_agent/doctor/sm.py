"""The subnet manager each port sees, against the control plane's record, and whether
each declared fabric name is one physical fabric.

`masters`: port key -> the master `sminfo` reached through that port (None: none answered);
the whole mapping None when sminfo is not installed. `managers`: master GUID -> every
manager `saquery SMIR` listed through it. `record`: what the control plane stored for this
node (`/api/agent/v1/record`), None when it could not be asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..protocol.fabric_identity import fabric_identity
from .ib import NO_SM, Port, _key
from .result import FAIL, OK, UNKNOWN, WARN, Check, worst

Master = Mapping[str, Any]


def _ib_linkup(ports: Sequence[Port] | None) -> list[Port]:
    return [p for p in ports or [] if p.get("link_layer") == "InfiniBand"
            and p.get("phys_state") == "LinkUp"]  # fmt: skip


def _sm(m: Master) -> str:
    return f"{m['guid']} (lid {m.get('lid')}, priority {m.get('priority')}, {m.get('state')})"


def _recorded(record: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {f"{p['device']}/{p['port']}": p for p in (record or {}).get("ports") or []}


def known_identities(record: Mapping[str, Any] | None) -> dict[str, str]:
    """Manager GUID -> the identity the control plane gave its fabric."""
    out: dict[str, str] = {}
    for fab in (record or {}).get("fabrics") or []:
        for guid in fab.get("managers") or []:
            out[guid] = fab["identity"]
    return out


def _agreement(
    seen: Mapping[str, str], record: Mapping[str, Any] | None, record_error: str
) -> tuple[str, str, str]:
    """(result, detail, action) of the ports' masters against the recorded ones."""
    if record is None:
        return UNKNOWN, f"control plane's record: unknown ({record_error})", ""
    recorded = _recorded(record)
    differ = []
    for key, guid in sorted(seen.items()):
        was = (recorded.get(key) or {}).get("sm_guid") or ""
        if was != guid:
            differ.append(f"{key} recorded {was or 'none'}, sees {guid}")
    if not differ:
        return OK, "the control plane's record agrees", ""
    return (
        WARN,
        "the control plane's record differs (an SM failover it has not heard of yet?): "
        + "; ".join(differ),
        "a running llmgw-agent reports the new master within a minute "
        "(systemctl status llmgw-agent); if it persists, compare `sminfo` on the fabric's "
        "other nodes: a flapping master means two SMs with equal priority",
    )


def subnet_managers(
    ports: Sequence[Port] | None,
    masters: Mapping[str, Master | None] | None,
    record: Mapping[str, Any] | None = None,
    record_error: str = "",
) -> Check:
    name = "subnet manager"
    linkup = _ib_linkup(ports)
    if not linkup:
        return Check(name, UNKNOWN, "not present: no InfiniBand port with a link", "")
    if masters is None:
        return Check(name, UNKNOWN, "sminfo is not installed: cannot ask the ports",
                     "apt-get install infiniband-diags (or dnf install infiniband-diags)")  # fmt: skip
    missing = [_key(p) for p in linkup if masters.get(_key(p)) is None]
    by_master: dict[str, list[str]] = {}
    about: dict[str, Master] = {}
    for p in linkup:
        m = masters.get(_key(p))
        if m is not None:
            by_master.setdefault(m["guid"], []).append(_key(p))
            about[m["guid"]] = m
    seen = {k: g for g, keys in by_master.items() for k in keys}
    parts = [f"{', '.join(keys)} see master {_sm(about[g])}" for g, keys in by_master.items()]
    results, actions = [], []
    if missing:
        results.append(FAIL)
        parts.insert(0, f"no subnet manager answers on {', '.join(missing)}")
        actions.append(NO_SM)
    agree, said, todo = _agreement(seen, record, record_error)
    parts.append(said)
    results.append(agree)
    if todo:
        actions.append(todo)
    return Check(name, worst(results) if results else OK, "; ".join(parts), "; ".join(actions))


def _identities(
    ports: Sequence[Port],
    masters: Mapping[str, Master | None],
    managers: Mapping[str, Sequence[Master] | None],
    known: Mapping[str, str],
) -> dict[str, str]:
    """Port key -> physical fabric identity, for every port whose master answered."""
    out: dict[str, str] = {}
    for p in ports:
        m = masters.get(_key(p))
        if m is not None:
            listed = managers.get(m["guid"]) or [m]
            out[_key(p)] = fabric_identity(listed, known)
    return out


def fabric_names(
    ports: Sequence[Port] | None,
    declared: Mapping[str, Sequence[str]],
    fabric_of: Mapping[str, str | None],
    masters: Mapping[str, Master | None] | None,
    managers: Mapping[str, Sequence[Master] | None],
    record: Mapping[str, Any] | None = None,
) -> Check:
    """Each name agent.yaml declares is one physical fabric, with an adapter behind it.

    `declared`: name -> adapters from agent.yaml; `fabric_of`: port key -> its declared name.
    """
    name = "fabric names"
    if not declared:
        if _ib_linkup(ports):
            return Check(name, WARN, "InfiniBand ports up but agent.yaml declares no fabric: "
                         "placement will not put multi-node work on them",
                         "list the fabric and its adapters under `fabrics:` in agent.yaml")  # fmt: skip
        return Check(name, UNKNOWN, "not present: no fabric declared and no InfiniBand port")
    if masters is None:
        return Check(name, UNKNOWN, "sminfo is not installed: physical identity unknown",
                     "apt-get install infiniband-diags")  # fmt: skip
    keys = {_key(p) for p in ports or []}
    results, parts, actions = [], [], []
    for fab, adapters in declared.items():
        absent = [
            a for a in adapters if a not in keys and not any(k.startswith(a + "/") for k in keys)
        ]
        if absent:
            results.append(FAIL)
            parts.append(f"{fab}: no adapter {', '.join(absent)} on this node")
            actions.append("correct the adapter names under `fabrics:` in agent.yaml (ibstat -l)")
    ids = _identities(_ib_linkup(ports), masters, managers, known_identities(record))
    by_name: dict[str, dict[str, list[str]]] = {}
    for key, ident in ids.items():
        named = fabric_of.get(key)
        if named is not None:
            by_name.setdefault(named, {}).setdefault(ident, []).append(key)
    for fab, found in sorted(by_name.items()):
        if len(found) > 1:
            results.append(FAIL)
            parts.append(
                f"{fab} spans {len(found)} physical fabrics: "
                + "; ".join(f"{i} via {', '.join(k)}" for i, k in sorted(found.items()))
            )
            actions.append(
                f"give each physical fabric its own name in agent.yaml: ports "
                f"declared {fab} must all reach one subnet manager"
            )
        else:
            parts.append(f"{fab} is physical fabric {next(iter(found))}")
    for fab in declared:
        if fab not in by_name:
            results.append(WARN)
            parts.append(f"{fab}: no port with a subnet manager, identity unknown")
    recorded = _recorded(record)
    differ = [f"{k} recorded {(recorded.get(k) or {}).get('physical_fabric') or 'none'}, "
              f"now {i}" for k, i in sorted(ids.items())
              if record is not None and (recorded.get(k) or {}).get("physical_fabric") != i]  # fmt: skip
    if differ:
        results.append(WARN)
        parts.append("control plane's record differs: " + "; ".join(differ))
        actions.append("a running llmgw-agent reports it within a minute")
    return Check(name, worst(results) if results else OK, "; ".join(parts), "; ".join(actions))
