"""Which device of which host an adapter is, and which leaf carries which rail.

See :mod:`llmgw.fabrics.topology` for the rules: owners from node
descriptions, the rail of a device name, storage and management leaves.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from .ibnetdiscover import Node

RAIL_OPTIMISED_SHARE = 0.75

_DEVICE = re.compile(r"[A-Za-z][A-Za-z0-9]*?(?:[_-]?)(\d+)\Z")
_VENDOR_DEFAULT = re.compile(
    r"(?i)mellanox technologies|nvidia technologies|aggregation node|\AMT\d{4,}\b|\bconnectx"
)


# names a device has on its own: the kernel's (mlx5_0) and DGX OS's (HCA-1)
_ADAPTER_NAME = re.compile(r"(?i)(?:mlx\d+_(\d+)|(hca)[-_]?(\d+))\Z")
# a leaf named for storage or management is not a rail, whatever its hosts
_NOT_RAIL = re.compile(r"(?i)stor|mgmt|manage|\bufm\b")
# a host named for UFM or management is no rail member, wherever it is cabled
_MANAGEMENT_HOST = re.compile(r"(?i)ufm|mgmt|manage|\bmgt\b")
_PLACEHOLDER_HOST = frozenset(("localhost", "localhost.localdomain", "(none)"))


def split_description(desc: str) -> tuple[str | None, str | None]:
    """``"host mlx5_3"`` -> ``("host", "mlx5_3")``; vendor defaults -> ``(None, None)``;
    ``"HCA-3"`` -> ``(None, "HCA-3")``; ``"localhost mlx5_0"`` -> ``(None, "mlx5_0")``."""
    desc = desc.strip()
    if not desc or _VENDOR_DEFAULT.search(desc):
        return None, None
    parts = desc.split()
    if len(parts) == 1:
        if _ADAPTER_NAME.match(parts[0]):
            return None, parts[0]
        return (None if parts[0].lower() in _PLACEHOLDER_HOST else parts[0]), None
    if len(parts) == 2 and _DEVICE.match(parts[1]):
        host = None if parts[0].lower() in _PLACEHOLDER_HOST else parts[0]
        return host, parts[1]
    return None, None


def device_number(device: str | None) -> int | None:
    if device is None:
        return None
    m = _DEVICE.match(device)
    return int(m.group(1)) if m else None


def device_rail(device: str | None) -> int | None:
    """The rail a device name says: ``mlx5_N`` -> N, ``HCA-N`` -> N-1 (see the
    module docstring); other names by their number."""
    if device is None:
        return None
    m = _ADAPTER_NAME.match(device)
    if m is None:
        return device_number(device)
    if m.group(2) is not None:
        return int(m.group(3)) - 1
    return int(m.group(1))


def rail_leaves(adapters: list[dict[str, Any]], nodes: dict[str, Node]) -> set[str]:
    """The leaves that may be rails (see :mod:`llmgw.fabrics.topology`)."""
    placed: list[tuple[str | None, str]] = []
    leaves_of_host: dict[str, set[str]] = {}
    for a in adapters:
        leaf = a["leaf_guid"]
        if leaf is None or a["rail"] is None:
            continue
        host = a.get("host", a["node"])
        placed.append((host, leaf))
        if host is not None:
            on = leaves_of_host.get(host)
            if on is None:
                on = leaves_of_host[host] = set()
            on.add(leaf)
    # per leaf: adapters of hosts on other leaves too, minus those only here
    spread: Counter[str] = Counter()
    for host, leaf in placed:
        if host is None:
            spread[leaf] += 0
        elif len(leaves_of_host[host]) > 1:
            spread[leaf] += 1
        else:
            spread[leaf] -= 1
    return {
        leaf
        for leaf, n in spread.items()
        if n >= 0 and not _NOT_RAIL.search(nodes[leaf].description)
    }


def _rail_adapters(adapters: list[dict[str, Any]]) -> Counter[str]:
    """How many adapters with a rail each host has."""
    count: Counter[str] = Counter()
    for a in adapters:
        host = a.get("host", a["node"])
        if a["rail"] is not None and host is not None:
            count[host] += 1
    return count


def _management(
    candidates: list[dict[str, Any]], per_host: Counter[str], aligned_hosts: set[str]
) -> None:
    """Say which misaligned adapters are a UFM or management host's: one
    named so, or one with fewer adapters than the fabric's compute hosts
    and none of them on its rail's leaf (a management host takes whatever
    leaf ports are free; it is no rail member, and its cabling no fault)."""
    counts = Counter(n for n in per_host.values() if n > 1)
    compute = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0] if counts else 0
    for m in candidates:
        host = m["host"]
        if host is not None and _MANAGEMENT_HOST.search(host):
            m["management"] = "a UFM or management host, by its name"
        elif m["node"] is not None and host not in aligned_hosts and per_host[host] < compute:
            m["management"] = (
                f"a management host: {per_host[host]} adapters where compute hosts have "
                f"{compute}, none on its rail's leaf"
            )
        else:
            m["management"] = None


def rails_of(adapters: list[dict[str, Any]], rail_leaves: set[str]) -> dict[str, Any]:
    """Which leaf carries which rail, and which adapters sit on another's leaf.
    A host with one adapter has no rails to keep apart: it is left out."""
    per_host = _rail_adapters(adapters)
    on_leaf: dict[str, Counter[int]] = {}
    names: dict[tuple[str, int], Counter[str]] = {}
    placed_on: list[dict[str, Any]] = []
    for a in adapters:
        rail, leaf = a["rail"], a["leaf_guid"]
        if rail is None or leaf not in rail_leaves:
            continue
        # Only a named host is known to have one: an adapter with no node
        # description may share its machine with adapters of other GUIDs.
        if a["node"] is not None and per_host[a["node"]] == 1:
            continue
        placed_on.append(a)
        c = on_leaf.get(leaf)
        if c is None:
            c = on_leaf[leaf] = Counter()
        c[rail] += 1
        n = names.get((leaf, rail))
        if n is None:
            n = names[(leaf, rail)] = Counter()
        n[a["device"]] += 1
    # a leaf belongs to its most common rail; a tie has no owner (cannot tell)
    owner: dict[str, int] = {}
    for leaf, counts in on_leaf.items():
        top = counts.most_common(2)
        if len(top) == 1 or top[0][1] > top[1][1]:
            owner[leaf] = top[0][0]
    owner_name = {leaf: names[(leaf, r)].most_common(1)[0][0] for leaf, r in owner.items()}
    leaves_of: dict[int, list[str]] = {}
    for leaf, rail in owner.items():
        leaves_of.setdefault(rail, []).append(leaf)
    for v in leaves_of.values():
        v.sort()

    aligned = 0
    aligned_hosts: set[str] = set()
    candidates: list[dict[str, Any]] = []
    for a in placed_on:
        leaf_owner = owner.get(a["leaf_guid"])
        if leaf_owner is None:
            continue  # a leaf split evenly between rails: belongs to no rail
        if leaf_owner == a["rail"]:
            aligned += 1
            aligned_hosts.add(a.get("host", a["node"]))
            continue
        candidates.append(
            {
                "node": a["node"],
                "host": a.get("host", a["node"]),
                "host_note": a.get("host_note"),
                "device": a["device"],
                "rail": a["rail"],
                "adapter_guid": a["guid"],
                "leaf_guid": a["leaf_guid"],
                "leaf_port": a["leaf_port"],
                "leaf_rail": leaf_owner,
                "leaf_carries": owner_name[a["leaf_guid"]],
                "expected_leaf_guids": leaves_of.get(a["rail"], []),
            }
        )
    placed = len(placed_on)
    share = aligned / placed if placed else 1.0
    optimised = placed > 0 and share >= RAIL_OPTIMISED_SHARE
    _management(candidates, per_host, aligned_hosts)
    return {
        "optimised": optimised,
        "aligned_share": round(share, 4),
        "misaligned": candidates if optimised else [],
        "leaf_rail": owner if optimised else {},
        "leaf_rail_name": owner_name if optimised else {},
    }
