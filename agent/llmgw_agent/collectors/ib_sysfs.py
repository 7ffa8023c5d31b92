"""InfiniBand and RoCE ports as the kernel shows them under <sys>/class/infiniband.

Pure reading and parsing, shared by the `ib` and `sm` collectors. On a node the agent reads
these files; `ibstat` prints the same fields (see `parse_ibstat` in ib.py) and is only the
fallback and the validation path, e.g. under ibsim, whose simulated adapters have no sysfs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The counters the control plane keeps. A file that is missing is left out: unknown, not 0.
COUNTERS = (
    "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
    "port_xmit_discards", "excessive_buffer_overrun_errors", "local_link_integrity_errors",
    "port_rcv_remote_physical_errors", "port_xmit_constraint_errors",
    "port_rcv_constraint_errors", "VL15_dropped",
)  # fmt: skip
# PortXmitData/PortRcvData count 32-bit words ("octets divided by 4", IBA 16.1.3.5), and
# sysfs passes them through unscaled: times 4 is bytes. The payload sends bytes.
DATA_WORD_COUNTERS = ("port_xmit_data", "port_rcv_data")

# sysfs writes "4: ACTIVE", ibstat "Active", ibsim's ibstat "Initializing": one vocabulary.
STATES = {
    "DOWN": "DOWN", "INIT": "INIT", "INITIALIZING": "INIT", "ARMED": "ARMED",
    "ACTIVE": "ACTIVE", "ACTIVE_DEFER": "ACTIVE_DEFER", "NOP": "NOP",
}  # fmt: skip
STATE_BY_CODE = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_BY_CODE = {
    0: "NoStateChange", 1: "Sleep", 2: "Polling", 3: "Disabled",
    4: "PortConfigurationTraining", 5: "LinkUp", 6: "LinkErrorRecovery", 7: "PhyTest",
}  # fmt: skip
_PHYS_NAMES = {v.lower().replace(" ", ""): v for v in PHYS_BY_CODE.values()}
# ibsim's ibstat prints "Link layer: IB"; the kernel and real ibstat say "InfiniBand".
LINK_LAYERS = {"infiniband": "InfiniBand", "ib": "InfiniBand", "ethernet": "Ethernet"}

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec)?\s*(?:\((.*)\))?\s*$")
_CODED = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*$")


def parse_rate(text: str | None) -> tuple[int | float | None, str | None]:
    """ "400 Gb/sec (4X NDR)" -> (400, "4X NDR"); ibstat's bare "400" -> (400, None).

    The trap: ibstat prints the rate with no unit while sysfs prints unit and width.
    """
    if text is None:
        return None, None
    m = _RATE.match(text)
    if m is None:
        return None, None
    value = float(m.group(1))
    gbps: int | float = int(value) if value.is_integer() else value
    detail = (m.group(2) or "").strip() or None
    return gbps, detail


def parse_state(text: str | None) -> str | None:
    """ "4: ACTIVE" (sysfs), "Active" (ibstat), "Initializing" (ibstat) -> "ACTIVE"/"INIT"."""
    if text is None or not text.strip():
        return None
    m = _CODED.match(text)
    if m is not None:
        name = m.group(2).strip().upper()
        return STATES.get(name) or STATE_BY_CODE.get(int(m.group(1)), name)
    name = text.strip().upper()
    return STATES.get(name, name)


def parse_phys_state(text: str | None) -> str | None:
    """ "5: LinkUp" (sysfs) or "LinkUp" (ibstat) -> "LinkUp"."""
    if text is None or not text.strip():
        return None
    m = _CODED.match(text)
    if m is not None:
        return PHYS_BY_CODE.get(int(m.group(1)), m.group(2).strip())
    raw = text.strip()
    return _PHYS_NAMES.get(raw.lower().replace(" ", ""), raw)


def parse_link_layer(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    raw = text.strip()
    return LINK_LAYERS.get(raw.lower(), raw)


def guid_from_sysfs(text: str | None) -> str | None:
    """A sysfs node_guid "a088:c203:0074:cfda" -> "0xa088c2030074cfda"; all zero -> None."""
    if text is None:
        return None
    digits = text.strip().replace(":", "").lower()
    if not re.fullmatch(r"[0-9a-f]{16}", digits) or int(digits, 16) == 0:
        return None
    return "0x" + digits


def guid_from_gid(gid: str | None) -> str | None:
    """The port GUID is the interface id, the low 64 bits of the port's GID 0."""
    if gid is None:
        return None
    groups = gid.strip().lower().split(":")
    if len(groups) != 8:
        return None
    return guid_from_sysfs(":".join(groups[4:]))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        # Reading an unused GID slot fails with EINVAL on current kernels: unknown, not fatal.
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


@dataclass
class Port:
    device: str
    port: int
    link_layer: str | None
    state: str | None
    phys_state: str | None
    rate_gbps: int | float | None
    rate_text: str | None
    node_guid: str | None
    port_guid: str | None
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def active(self) -> bool:
        """Can carry traffic: logical state ACTIVE and physical state LinkUp."""
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"

    @property
    def infiniband(self) -> bool:
        return self.link_layer == "InfiniBand"

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "port": self.port,
            "link_layer": self.link_layer,
            "state": self.state,
            "phys_state": self.phys_state,
            "rate_gbps": self.rate_gbps,
            "rate_text": self.rate_text,
            "node_guid": self.node_guid,
            "port_guid": self.port_guid,
            "counters": dict(self.counters),
        }


def ib_class(sys_root: Path) -> Path:
    return sys_root / "class" / "infiniband"


def has_adapters(sys_root: Path) -> bool:
    base = ib_class(sys_root)
    return base.is_dir() and any(base.iterdir())


def _port_numbers(ports_dir: Path) -> list[int]:
    try:
        names = [p.name for p in ports_dir.iterdir()]
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def read_counters(port_dir: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in COUNTERS:
        value = _int(port_dir / "counters" / name)
        if value is None:
            continue
        out[name] = value * 4 if name in DATA_WORD_COUNTERS else value
    return out


def read_ports(sys_root: Path) -> list[Port]:
    """Every port of every RDMA device, sorted by device then port."""
    base = ib_class(sys_root)
    try:
        devices = sorted(p.name for p in base.iterdir())
    except OSError:
        return []
    ports: list[Port] = []
    for dev in devices:
        dev_dir = base / dev
        node_guid = guid_from_sysfs(_read(dev_dir / "node_guid"))
        for n in _port_numbers(dev_dir / "ports"):
            pdir = dev_dir / "ports" / str(n)
            link_layer = parse_link_layer(_read(pdir / "link_layer"))
            gbps, detail = parse_rate(_read(pdir / "rate"))
            ports.append(
                Port(
                    device=dev,
                    port=n,
                    link_layer=link_layer,
                    state=parse_state(_read(pdir / "state")),
                    phys_state=parse_phys_state(_read(pdir / "phys_state")),
                    rate_gbps=gbps,
                    rate_text=detail,
                    node_guid=node_guid,
                    # On Ethernet GID 0 is the MAC-derived link-local address, not a GUID.
                    port_guid=(
                        guid_from_gid(_read(pdir / "gids" / "0"))
                        if link_layer == "InfiniBand"
                        else None
                    ),
                    counters=read_counters(pdir),
                )
            )
    return ports


@dataclass(frozen=True)
class RoceGid:
    index: int
    gid: str
    netdev: str | None
    address: str  # the IP address the GID encodes


def roce_v2_gids(sys_root: Path, device: str, port: int) -> list[RoceGid]:
    """The RoCE v2 GIDs of a port that carry an IP address, by GID index."""
    import ipaddress

    pdir = ib_class(sys_root) / device / "ports" / str(port)
    out: list[RoceGid] = []
    for i in _port_numbers(pdir / "gids"):
        kind = _read(pdir / "gid_attrs" / "types" / str(i))
        if kind is None or "v2" not in kind.lower():
            continue
        gid = _read(pdir / "gids" / str(i))
        if gid is None:
            continue
        try:
            addr = ipaddress.IPv6Address(gid)
        except ValueError:
            continue
        if addr.is_unspecified:
            continue
        mapped = addr.ipv4_mapped
        if mapped is not None:
            text = str(mapped)
        elif addr.is_link_local:
            continue  # fe80::/64 from the MAC: no routed network to name
        else:
            text = str(addr)
        out.append(RoceGid(i, gid, _read(pdir / "gid_attrs" / "ndevs" / str(i)), text))
    return out
