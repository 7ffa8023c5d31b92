"""Parse the text that ``ibnetdiscover`` prints, in its two usual shapes.

* The default topology dump: one record per node (``Switch``/``Ca``/``Rt``
  header after ``vendid=``/``devid=``/``...guid=`` lines), then one
  ``[port]`` line per *connected* port naming the peer and, in a trailing
  ``#`` comment, the peer's node description, its LID and the link's active
  width and speed (``4xNDR``).
* The ports report, ``ibnetdiscover -p``: one line per port of every node,
  ``CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x... ( 'a' - 'b' )``,
  or, for a port with nothing attached, the node's description alone.

The parser is written by hand and runs in one pass over the lines: a fabric
map is recomputed from every discovery, so it has to stay linear. Anything it
does not recognise raises :class:`ParseError` with the line number and the
line, rather than being skipped: a line it cannot read may be the one naming a
cable.

Things the real tools print that matter here:

* A CA's node GUID and its port GUID differ in general (``"H-...0004"[1](100005)``
  under ibsim; equal on the ConnectX-7s of the real DGX dump). The topology
  dump gives both; the ports report gives only the port GUID, so there an
  adapter is known by its port GUID.
* GUIDs in ``(...)`` are printed without leading zeros; all GUIDs here are
  normalised to ``0x`` + 16 lower-case hex digits.
* The ports report prints a width and speed for unconnected ports too
  (``4x SDR``, ``4x ???``): a placeholder, not a link.
* A discovery that could not leave the adapter it started from prints that
  adapter's record with no port lines at all. That is refused, not read as a
  fabric of one adapter.
* Switches carry SHARP aggregation nodes: ``Ca`` records whose
  ``sysimgguid`` is the switch's own, attached to the switch's last port.

Pure Python, no Django: the control plane and the command line both use it.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

NodeKind = Literal["switch", "ca", "router"]

#: Per-lane data rate of each IB speed, in Gb/s, as ``ibstat`` reports it
#: (4xSDR = 10, 4xFDR = 56, 4xEDR = 100, 4xHDR = 200, 4xNDR = 400).
LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
WIDTHS: dict[str, int] = {"1x": 1, "2x": 2, "4x": 4, "8x": 8, "12x": 12}


class ParseError(ValueError):
    """A dump that cannot be read as a fabric; says where and why."""

    def __init__(self, line_no: int, line: str, reason: str) -> None:
        self.line_no = line_no
        self.line = line
        self.reason = reason
        super().__init__(f"line {line_no}: {reason}: {line!r}")


class Rate(NamedTuple):
    """A link's active width and speed: ``Rate("4x", "NDR")`` is 400 Gb/s."""

    width: str
    speed: str

    @property
    def text(self) -> str:
        return f"{self.width}{self.speed}"

    @property
    def gbps(self) -> float | None:
        """Data rate in Gb/s, or None when the tool printed ``??``/``???``."""
        lanes = WIDTHS.get(self.width)
        lane = LANE_GBPS.get(self.speed)
        if lanes is None or lane is None:
            return None
        return lanes * lane


@dataclass(slots=True)
class Node:
    guid: str
    kind: NodeKind
    description: str
    nports: int
    line_no: int
    lid: int | None = None
    sysimgguid: str | None = None
    devid: str | None = None
    vendid: str | None = None
    #: port number -> port GUID (CAs and routers; a switch's ports share its GUID)
    port_guids: dict[int, str] = field(default_factory=dict)


class Endpoint(NamedTuple):
    guid: str
    port: int


@dataclass(slots=True)
class Link:
    a: Endpoint
    b: Endpoint
    rate: Rate | None
    line_no: int


@dataclass(slots=True)
class Fabric:
    """What one discovery saw: nodes by GUID, and each cable once."""

    nodes: dict[str, Node]
    links: list[Link]
    format: Literal["topology", "ports"]
    initiated_from: str | None = None
    #: things the dump said that do not add up but do not stop the map
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------
# helpers


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic GC while building a map of acyclic objects.

    A 16,000-adapter dump makes a few hundred thousand small objects; the
    collector walking them again and again costs a third of the time and
    finds nothing (nothing here forms a cycle). Only re-enables what it
    disabled.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_GUIDS: dict[str, str] = {}


def _guid(hexdigits: str) -> str:
    # hot path: the regexes already matched 1-16 hex digits
    g = _GUIDS.get(hexdigits)
    if g is None:
        g = "0x" + hexdigits.lower().rjust(16, "0")
        if len(_GUIDS) < 100_000:  # bounded: a long-lived control plane parses many dumps
            _GUIDS[hexdigits] = g
    return g


_RATE = re.compile(r"(1x|2x|4x|8x|12x|\?\?)\s?([A-Z][A-Z0-9]*|\?\?\?)\Z")


def parse_rate(text: str) -> Rate:
    """``"4xNDR"`` or ``"4x NDR"`` -> Rate; ValueError if it is neither."""
    m = _RATE.match(text.strip())
    if m is None:
        raise ValueError(f"not a link rate: {text!r}")
    return Rate(m.group(1), m.group(2))


_TYPE_LETTER: dict[str, NodeKind] = {"S": "switch", "H": "ca", "R": "router"}

# ---------------------------------------------------------------------------
# topology format

_HEADER = re.compile(
    r'(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]{1,16})"\s*(?:#\s*"(.*)"(.*))?\Z'
)
_SWITCH_TAIL = re.compile(r"\s*(?:enhanced|base)\s+port\s+0\s+lid\s+(\d+)\s+lmc\s+\d+")
_PORT = re.compile(
    r"\[(\d+)\](?:\[ext \d+\])?"  # local port, optional chassis port
    r"(?:\(([0-9a-fA-F]{1,16})\))?"  # local port GUID (CA/router records)
    r'\s*"([SHR?])-([0-9a-fA-F]{1,16})"\[(\d+)\](?:\[ext \d+\])?'  # peer node[port]
    r"\s*(?:\(([0-9a-fA-F]{1,16})\))?"  # peer port GUID when peer is not a switch
    # comment: [lid L lmc M ]"peer desc" lid L WIDTHSPEED[ s=.. w=.. v=..][ slot N| (scp)]
    r'\s*(?:#\s*(?:lid\s+(\d+)\s+lmc\s+\d+\s+)?"(.*)"\s+lid\s+(\d+)\s+'
    r"(1x|2x|4x|8x|12x|\?\?)([A-Z][A-Z0-9]*|\?\?\?)(?:\s.*)?)?\Z"
)
_ID_KEYS = frozenset(("vendid", "devid", "sysimgguid", "switchguid", "caguid", "rtguid"))
_ID_VALUE = re.compile(r"(?:0x)?([0-9a-fA-F]{1,16})(?:\([0-9a-fA-F]{1,16}\))?\s*(?:#.*)?\Z")
_INITIATED = re.compile(r"#\s*Initiated from node ([0-9a-fA-F]{1,16})")
_CHASSIS = re.compile(r"Chassis\s+\d+(?:\s+\(guid 0x[0-9a-fA-F]+\))?\Z")

# what one port line said, kept until every record is read
_Half = tuple[str, int, str, int, Rate | None, int]  # guid, port, peer guid, peer port, rate, line


def parse_topology(text: str) -> Fabric:
    """Parse the default ``ibnetdiscover`` output (also ``-f``, ``-g``)."""
    with gc_paused():
        return _parse_topology(text)


def _parse_topology(text: str) -> Fabric:
    lines = text.splitlines()
    reader = _TopologyReader()
    for i, raw in enumerate(lines, 1):
        line = raw.strip()
        if line:
            reader.read(i, raw, line)
    reader.close_record()
    if not reader.nodes:
        last = len(lines)
        raise ParseError(
            last, lines[-1] if lines else "", "no Switch or Ca record: not an ibnetdiscover dump"
        )
    fabric = Fabric(
        nodes=reader.nodes, links=[], format="topology", initiated_from=reader.initiated
    )
    _pair_halves(fabric, reader.halves, lines)
    return fabric


class _TopologyReader:
    """One pass over a topology dump, a line at a time: the records read so
    far, the one being read, and the port lines kept until every peer is known."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.halves: list[_Half] = []
        # the vendid=/devid=/sysimgguid= lines above the next record's header
        self.ids: dict[str, str] = {}
        self.current: Node | None = None
        self.current_ports = 0
        self.initiated: str | None = None
        self.header_lines: dict[str, str] = {}
        self.rates: dict[tuple[str, str], Rate] = {}

    def read(self, i: int, raw: str, line: str) -> None:
        c = line[0]
        if c == "[":
            self.port(i, raw, line)
            return
        if c == "#":
            if self.initiated is None:
                im = _INITIATED.match(line)
                if im is not None:
                    self.initiated = _guid(im.group(1))
            return
        if c in "SCR":
            hm = _HEADER.match(line)
            if hm is not None:
                self.header(i, raw, hm)
                return
            if _CHASSIS.match(line):
                return
        if c in "vdsrc" and self.id_line(i, raw, line):
            return
        if line == "Non-Chassis Nodes" or line.startswith("Hostname:"):
            return  # -g grouping output: headings only
        raise ParseError(i, raw, "not a line of ibnetdiscover output")

    def port(self, i: int, raw: str, line: str) -> None:
        current = self.current
        if current is None:
            raise ParseError(i, raw, "port line outside a Switch/Ca record")
        m = _PORT.match(line)
        if m is None:
            raise ParseError(i, raw, "unreadable port line (peer, lid or rate)")
        p_s, pguid, _t, peer_s, peer_port_s, _pp, lid_s, _d, _rl, width, speed = m.groups()
        port = int(p_s)
        if pguid is not None:
            current.port_guids[port] = _guid(pguid)
        rate: Rate | None = None
        if width is not None:
            rate = self.rates.get((width, speed))
            if rate is None:
                rate = self.rates[(width, speed)] = Rate(width, speed)
            if lid_s is not None and current.kind != "switch":
                current.lid = int(lid_s)
        self.halves.append((current.guid, port, _guid(peer_s), int(peer_port_s), rate, i))
        self.current_ports += 1

    def header(self, i: int, raw: str, hm: re.Match[str]) -> None:
        self.close_record()
        kind = _TYPE_LETTER[hm.group(3)]
        expected = {"Switch": "switch", "Ca": "ca", "Rt": "router"}[hm.group(1)]
        if kind != expected:
            raise ParseError(i, raw, f"{hm.group(1)} record named {hm.group(3)}-...")
        guid = _guid(hm.group(4))
        if guid in self.nodes:
            raise ParseError(i, raw, f"second record for {guid}")
        ids = self.ids
        node = Node(
            guid=guid,
            kind=kind,
            description=hm.group(5) if hm.group(5) is not None else "",
            nports=int(hm.group(2)),
            line_no=i,
            sysimgguid=ids.get("sysimgguid"),
            devid=ids.get("devid"),
            vendid=ids.get("vendid"),
        )
        if kind == "switch" and hm.group(6):
            tm = _SWITCH_TAIL.match(hm.group(6))
            if tm is not None:
                node.lid = int(tm.group(1))
        self.nodes[guid] = node
        self.header_lines[guid] = raw
        self.ids = {}
        self.current = node
        self.current_ports = 0

    def id_line(self, i: int, raw: str, line: str) -> bool:
        """Keep a ``vendid=``/``devid=``/``sysimgguid=`` value; False if not one."""
        key, eq, val = line.partition("=")
        if not eq or key not in _ID_KEYS:
            return False
        hm = _ID_VALUE.match(val)
        if hm is None:
            raise ParseError(i, raw, f"unreadable {key}")
        if key == "sysimgguid":
            self.ids[key] = _guid(hm.group(1))
        elif key in ("vendid", "devid"):
            self.ids[key] = "0x" + hm.group(1).lower().lstrip("0").rjust(1, "0")
        return True

    def close_record(self) -> None:
        node = self.current
        if node is not None and self.current_ports == 0:
            raise ParseError(
                node.line_no,
                self.header_lines[node.guid],
                f"{'switch' if node.kind == 'switch' else 'adapter'} {node.guid} "
                f'("{node.description}") has no connected port: discovery never left '
                "the node it started from (its link is down, or the fabric is unreachable)",
            )


def _pair_halves(fabric: Fabric, halves: list[_Half], lines: list[str]) -> None:
    """Each cable is printed from both ends; keep it once, check the ends agree."""
    seen: dict[tuple[str, int], tuple[str, int, Link]] = {}
    nodes = fabric.nodes
    links = fabric.links
    for guid, port, peer, peer_port, rate, line_no in halves:
        if peer not in nodes:
            raise ParseError(
                line_no,
                lines[line_no - 1],
                f"peer {peer} has no record in the dump (output cut short?)",
            )
        back = seen.get((peer, peer_port))
        if back is not None:
            if back[0] != guid or back[1] != port:
                fabric.warnings.append(
                    f"line {line_no}: {guid}[{port}] -> {peer}[{peer_port}], but line "
                    f"{back[2].line_no} has {peer}[{peer_port}] -> {back[0]}[{back[1]}]"
                )
                continue
            kept = back[2]
            if rate != kept.rate and rate is not None:
                fabric.warnings.append(
                    f"line {line_no}: {guid}[{port}] reports {rate.text}, its peer "
                    f"{peer}[{peer_port}] {kept.rate.text if kept.rate else 'no rate'} "
                    f"(line {kept.line_no})"
                )
                slower = kept.rate is None or (rate.gbps or 0) < (kept.rate.gbps or 0)
                if slower:  # a cable runs at what its slower end says
                    kept.rate = rate
            continue  # second end of a cable already kept
        if (guid, port) in seen:
            fabric.warnings.append(f"line {line_no}: {guid}[{port}] listed twice")
            continue
        link = Link(Endpoint(guid, port), Endpoint(peer, peer_port), rate, line_no)
        seen[(guid, port)] = (peer, peer_port, link)
        links.append(link)


# ---------------------------------------------------------------------------
# ports format (ibnetdiscover -p)

_PORTS_LINE = re.compile(
    r"(CA|SW|RT|\?\?)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+"
    r"(1x|2x|4x|8x|12x|\?\?)\s+([A-Z][A-Z0-9]*|\?\?\?)\s*"
    r"(?:-\s+(CA|SW|RT|\?\?)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+"
    r"\(\s'(.*)'\s+-\s+'(.*)'\s\)"  # ( 'local desc' - 'peer desc' )
    r"|'(.*)')\Z"  # unconnected: local desc only
)
_PORTS_KIND: dict[str, NodeKind] = {"CA": "ca", "SW": "switch", "RT": "router"}


def parse_ports(text: str) -> Fabric:
    """Parse ``ibnetdiscover -p`` output. Adapters are known by port GUID."""
    with gc_paused():
        return _parse_ports(text)


def _parse_ports(text: str) -> Fabric:
    nodes: dict[str, Node] = {}
    halves: list[_Half] = []
    lines = text.splitlines()

    def note(kind_s: str, lid: int, port: int, guid: str, desc: str, i: int, raw: str) -> None:
        kind = _PORTS_KIND.get(kind_s)
        if kind is None:
            raise ParseError(i, raw, f"unknown node type {kind_s!r}")
        node = nodes.get(guid)
        desc = desc.strip()  # some switch firmwares pad their description
        if node is None:
            node = Node(guid=guid, kind=kind, description=desc, nports=port, line_no=i, lid=lid)
            nodes[guid] = node
        elif node.kind != kind:
            raise ParseError(i, raw, f"{guid} is a {node.kind} elsewhere in the dump")
        else:
            if port > node.nports:
                node.nports = port
            if not node.description and desc:
                node.description = desc
        if kind != "switch":
            node.port_guids[port] = guid

    for i, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        m = _PORTS_LINE.match(line)
        if m is None:
            raise ParseError(i, raw, "not a line of `ibnetdiscover -p` output")
        guid = _guid(m.group(4))
        port = int(m.group(3))
        if m.group(7) is None:  # nothing attached: width/speed are placeholders
            note(m.group(1), int(m.group(2)), port, guid, m.group(13), i, raw)
            continue
        note(m.group(1), int(m.group(2)), port, guid, m.group(11), i, raw)
        peer = _guid(m.group(10))
        peer_port = int(m.group(9))
        note(m.group(7), int(m.group(8)), peer_port, peer, m.group(12), i, raw)
        halves.append((guid, port, peer, peer_port, Rate(m.group(5), m.group(6)), i))
    if not nodes:
        raise ParseError(
            len(lines), lines[-1] if lines else "", "no port lines: not `ibnetdiscover -p` output"
        )
    fabric = Fabric(nodes=nodes, links=[], format="ports")
    _pair_halves(fabric, halves, lines)
    linked = {e.guid for link in fabric.links for e in (link.a, link.b)}
    if not linked:
        first = min(nodes.values(), key=lambda n: n.line_no)
        raise ParseError(
            first.line_no,
            lines[first.line_no - 1],
            "no port is connected: discovery never left the node it started from",
        )
    return fabric


# ---------------------------------------------------------------------------


def parse(text: str) -> Fabric:
    """Parse either format, telling them apart by their first meaningful line."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if line[:2] in ("CA", "SW", "RT") and line[2:3].isspace():
            return parse_ports(text)
        return parse_topology(text)
    return parse_topology(text)  # raises: nothing in it
