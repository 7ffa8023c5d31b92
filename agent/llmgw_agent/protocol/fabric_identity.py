"""A physical InfiniBand fabric's identity, from the subnet managers listed on it.

Pure and dependency-free so the control plane imports the very same rule, and
the one GUID spelling every tool's output is turned into.

The master subnet manager is not an identity: it changes on a failover, and for the minute
its ports took to agree one fabric read as two. Every manager `saquery SMIR` lists belongs to
the fabric, so managers listed together are one fabric, named by the lowest GUID among
them. After the master dies the survivors list only themselves; the name carries over
through `known` (GUID -> identity, everything seen together before), so a failover never
renames a fabric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# 1 to 16 hex digits, "0x" optional: what ibnetdiscover, sminfo and saquery
# print. Nothing int() would also take ("+1", "1_0", 17 digits of leading
# zeros): a GUID that is not spelt like one is a parse error, not a guess.
_GUID = re.compile(r"(?:0x)?([0-9a-f]{1,16})\Z")


def normalize_guid(text: str) -> str:
    """GUID text as any tool prints it, e.g. "0x2C90200259201", "100005" or
    "0002:c902:0025:9201" (a GID's colon groups) -> "0x0002c90200259201"."""
    raw = text.strip().lower()
    if ":" in raw:
        groups = raw.split(":")
        if len(groups) != 4 or not all(len(g) == 4 for g in groups):
            raise ValueError(f"not a GUID: {text!r}")
        raw = "".join(groups)
    found = _GUID.match(raw)
    if found is None:
        raise ValueError(f"not a GUID: {text!r}")
    return "0x" + found.group(1).rjust(16, "0")


def _guids(managers: Iterable[Mapping[str, Any] | str]) -> set[str]:
    out: set[str] = set()
    for m in managers:
        guid = m if isinstance(m, str) else m.get("guid")
        if guid:
            out.add(normalize_guid(str(guid)))
    return out


def fabric_identity(
    managers: Iterable[Mapping[str, Any] | str],
    known: Mapping[str, str] | None = None,
) -> str:
    """The fabric's name: "0x" + 16 hex digits.

    `managers`: one listing (saquery SMIR, or the master sminfo named) as dicts with a
    "guid" or as GUID strings. `known`: manager GUID -> identity from earlier listings;
    when any of these managers is known, the (lowest) identity it had is kept. Otherwise the
    lowest GUID listed. Raises ValueError on an empty listing: no manager, no identity.
    """
    guids = _guids(managers)
    if not guids:
        raise ValueError("no subnet manager listed: the fabric has no identity")
    if known:
        earlier = {known[g] for g in guids if g in known}
        if earlier:
            return min(earlier)
    return min(guids)


def remember(
    managers: Iterable[Mapping[str, Any] | str],
    known: Mapping[str, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """(identity, known updated with every manager of this listing mapped to it)."""
    listed = list(managers)
    identity = fabric_identity(listed, known)
    updated = dict(known or {})
    for guid in _guids(listed):
        updated[guid] = identity
    return identity, updated
