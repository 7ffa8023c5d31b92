"""InfiniBand and RoCE ports, every heartbeat, and the declared fabrics the node can carry.

A port read once at registration left a node whose cable was later pulled on its fabric,
offered multi-node work that hangs on its first collective. So the ports are re-read from
sysfs on every heartbeat, and when the set of fabrics the node can carry traffic on changes,
the heartbeat says so once (`fabrics_changed`, `fabrics_active`).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import sm  # registers the `sm` collector before this one: ports read its findings
from .ib_sysfs import (
    Port,
    ib_class,
    parse_link_layer,
    parse_phys_state,
    parse_rate,
    parse_state,
    read_ports,
    roce_v2_gids,
)
from .registry import Roots, collector

log = logging.getLogger("llmgw_agent.collectors.ib")

MEMO_CARRIES = "ib.carries"


def _adapter_matches(adapter: str, port: Port) -> bool:
    # agent.yaml names a device ("mlx5_0": any of its ports) or one port ("mlx5_0/1").
    dev, sep, num = adapter.partition("/")
    return dev == port.device and (not sep or num == str(port.port))


def fabric_of(port: Port, fabrics: Mapping[str, Sequence[str]]) -> str | None:
    """The declared fabric this port belongs to, or None when agent.yaml names none."""
    for name, adapters in fabrics.items():
        if any(_adapter_matches(a, port) for a in adapters):
            return name
    return None


def carries(ports: Iterable[Port], fabrics: Mapping[str, Sequence[str]]) -> set[str]:
    """Declared fabrics with at least one adapter port ACTIVE and LinkUp.

    Ports up without a subnet manager read INIT: they cannot carry traffic, so they count
    as down, exactly like an unplugged cable.
    """
    out: set[str] = set()
    for port in ports:
        if port.active:
            name = fabric_of(port, fabrics)
            if name is not None:
                out.add(name)
    return out


_IBSTAT_CA = re.compile(r"^CA:?\s+'([^']+)'")
_IBSTAT_PORT = re.compile(r"^Port\s+(\d+):")


def parse_ibstat(text: str) -> list[Port]:
    """Ports from `ibstat` (or `ibstat <ca> <port>`) output.

    The agent reads sysfs on a node; this is the fallback and the validation path, e.g. under
    ibsim, whose simulated adapters exist only for the tools (`ibsim-run`), not in /sys.
    Traps: `Rate: 400` has no unit (sysfs says "400 Gb/sec (4X NDR)"), ibsim prints
    `Link layer: IB`, and a port with no subnet manager reads `State: Initializing`.
    """
    ports: list[Port] = []
    device: str | None = None
    node_guid: str | None = None
    current: Port | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = _IBSTAT_CA.match(line)
        if m is not None:
            device, node_guid, current = m.group(1), None, None
            continue
        m = _IBSTAT_PORT.match(line)
        if m is not None and device is not None:
            current = Port(device, int(m.group(1)), None, None, None, None, None, node_guid, None)
            ports.append(current)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Node GUID":
            node_guid = _hex_guid(value)
        elif current is None:
            continue
        elif key == "State":
            current.state = parse_state(value)
        elif key == "Physical state":
            current.phys_state = parse_phys_state(value)
        elif key == "Rate":
            current.rate_gbps, current.rate_text = parse_rate(value)
        elif key == "Port GUID":
            current.port_guid = _hex_guid(value)
        elif key == "Link layer":
            current.link_layer = parse_link_layer(value)
    for port in ports:
        if port.link_layer != "InfiniBand":
            port.port_guid = None  # RoCE: ibstat derives it from the MAC, it names no IB port
    return ports


def _hex_guid(text: str) -> str | None:
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return None if value == 0 else f"0x{value:016x}"


def _ip_prefixes(
    roots: Roots, netdev: str
) -> list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]:
    """The interface's addresses with their prefix lengths, from `ip -j addr` via the runner."""
    result = roots.run(["ip", "-j", "addr", "show", "dev", netdev])
    out: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface] = []
    if result.returncode == 0:
        try:
            links = json.loads(result.stdout or "[]")
        except ValueError:
            links = []
        for link in links if isinstance(links, list) else []:
            for info in link.get("addr_info", []) if isinstance(link, dict) else []:
                try:
                    out.append(ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}"))
                except (KeyError, TypeError, ValueError):
                    continue
    if not out and roots.sys == Path("/sys"):
        # No `ip` (a minimal container): psutil reads the live host, never a fixture root.
        import psutil

        for a in psutil.net_if_addrs().get(netdev, []):
            if a.netmask:
                try:
                    out.append(ipaddress.ip_interface(f"{a.address.split('%')[0]}/{a.netmask}"))
                except ValueError:
                    continue
    return out


def roce_network(roots: Roots, port: Port) -> str | None:
    """The IP network of the port's RoCE v2 GID, e.g. "10.1.2.0/24"; IPv4 first."""
    gids = roce_v2_gids(roots.sys, port.device, port.port)
    gids.sort(key=lambda g: (":" in g.address, g.index))  # IPv4 before IPv6
    cache: dict[str, list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]] = {}
    for gid in gids:
        if gid.netdev is None:
            continue
        if gid.netdev not in cache:
            try:
                cache[gid.netdev] = _ip_prefixes(roots, gid.netdev)
            except Exception as exc:  # noqa: BLE001 - no `ip` must cost the field, not the port
                log.debug("ip addr for %s failed: %s", gid.netdev, exc)
                cache[gid.netdev] = []
        addr = ipaddress.ip_address(gid.address)
        for iface in cache[gid.netdev]:
            if iface.ip == addr:
                return str(iface.network)
    return None


@collector("ib")
def collect(roots: Roots) -> dict[str, Any]:
    ports = read_ports(roots.sys)
    sampled = sm.port_managers(roots)
    records: list[dict[str, Any]] = []
    for port in ports:
        record = port.as_dict()
        record["fabric"] = fabric_of(port, roots.fabrics)
        record["sm"] = sampled.get(port.key) if port.infiniband and port.active else None
        if port.link_layer == "Ethernet":
            record["roce_network"] = roce_network(roots, port)
        records.append(record)
    data: dict[str, Any] = {}
    # [] is an answer (the RDMA class is there, no port in it); a node without the class
    # (no RDMA stack: a CPU node) sends no key, like a failed collector.
    if records or ib_class(roots.sys).is_dir():
        data["ports"] = records
    now = carries(ports, roots.fabrics)
    # The first heartbeat after a start says it too: the control plane only knows what was
    # declared at registration, not what is up.
    previous = roots.memo.get(MEMO_CARRIES)
    if previous is None or set(previous) != now:
        if roots.fabrics or previous is not None:
            data["fabrics_changed"] = True
            data["fabrics_active"] = sorted(now)
            if previous is not None:
                log.info("fabrics carried changed: %s -> %s", sorted(previous), sorted(now))
        roots.memo[MEMO_CARRIES] = frozenset(now)
    return data
