"""The parser, on real dumps (DGX H100 NDR; treydock's -p fixtures) and on what
the real ibnetdiscover printed against ibsim (tests/data/ibsim)."""

from __future__ import annotations

import re

import pytest
from llmgw_agent.protocol.fabric_identity import normalize_guid

from llmgw.fabrics.ibnetdiscover import (
    ParseError,
    Rate,
    parse,
    parse_ports,
    parse_rate,
    parse_topology,
)

from .data import IBSIM, NDR, NDR_BAD, PORTS

GUID = re.compile(r"0x[0-9a-f]{16}\Z")


def test_real_ndr_dump_counts_match_the_file() -> None:
    text = NDR.read_text()
    assert text.startswith("# SOURCE: github.com/NVIDIA/topograph")
    # independent of the parser: count record headers and port lines
    n_switch = len(re.findall(r"^Switch\t", text, re.M))
    n_ca = len(re.findall(r"^Ca\t", text, re.M))
    n_port_lines = len(re.findall(r"^\[\d+\]", text, re.M))
    assert (n_switch, n_ca) == (40, 582)

    fabric = parse(text)
    kinds = [n.kind for n in fabric.nodes.values()]
    assert kinds.count("switch") == 40
    assert kinds.count("ca") == 582
    assert len(fabric.links) * 2 == n_port_lines  # every cable printed from both ends
    assert fabric.warnings == []
    assert fabric.format == "topology"
    assert fabric.initiated_from == "0xe09d730300156ff6"
    assert {link.rate for link in fabric.links} == {Rate("4x", "NDR")}
    for guid, node in fabric.nodes.items():
        assert GUID.match(guid) and node.guid == guid
    leaf = fabric.nodes["0x2c5eab0300b87b40"]
    assert leaf.description == "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"
    assert (leaf.nports, leaf.lid, leaf.devid) == (65, 73, "0xd2f2")
    hca = fabric.nodes["0xe09d7303007a4bd8"]
    assert hca.description == "a08-p1-dgx-04-c01 mlx5_5"
    assert hca.port_guids == {1: "0xe09d7303007a4bd8"}
    assert hca.lid == 647


def test_failed_discovery_is_refused_with_its_line() -> None:
    text = NDR_BAD.read_text()
    with pytest.raises(ParseError) as e:
        parse(text)
    assert e.value.line_no == 11
    assert e.value.line == text.splitlines()[10]
    assert e.value.line.startswith('Ca\t1 "H-b8e92403009ca838"')
    assert "no connected port" in e.value.reason
    assert "line 11" in str(e.value)


def test_ports_report_sample() -> None:
    fabric = parse(PORTS.read_text())
    assert fabric.format == "ports"
    kinds = [n.kind for n in fabric.nodes.values()]
    assert (kinds.count("switch"), kinds.count("ca")) == (9, 5)
    # 6 distinct cables; '???' and 'SDR' lines are unconnected ports, not links
    assert len(fabric.links) == 6
    worker = fabric.nodes["0xb83fd20300da1138"]
    assert worker.description == "worker20 mlx5_3"
    assert worker.lid == 88
    # padded descriptions (' 5FB0406-spine-IB03 ') are trimmed
    assert fabric.nodes["0x946dae030053ec1a"].description == "5FB0406-spine-IB03"
    assert fabric.nodes["0x0002c9020040f160"].nports == 22
    # the hand-made fixture cables one aggregation port to two switches: kept once, said
    assert len(fabric.warnings) == 1 and "0x946dae0300630bfe[1]" in fabric.warnings[0]
    rates = {(link.a.guid, link.b.guid): link.rate for link in fabric.links}
    assert rates[("0x7cfe9003003b4bde", "0x7cfe9003009ce5b0")] == Rate("4x", "EDR")


def test_ibsim_dumps_from_the_real_tool() -> None:
    topo = parse(IBSIM.joinpath("fat-tree-ibnetdiscover.txt").read_text())
    ports = parse(IBSIM.joinpath("fat-tree-ibnetdiscover-p.txt").read_text())
    full = parse(IBSIM.joinpath("fat-tree-ibnetdiscover-f.txt").read_text())
    assert len(topo.nodes) == len(ports.nodes) == len(full.nodes) == 28
    assert len(topo.links) == len(ports.links) == len(full.links) == 32
    # ibsim gives CA ports their own GUID: the topology dump says both, -p only the port's
    node = next(n for n in topo.nodes.values() if n.description == "node001 mlx5_0")
    assert node.guid == "0x0000000000100000"
    assert node.port_guids == {1: "0x0000000000100001"}
    assert "0x0000000000100001" in ports.nodes and "0x0000000000100000" not in ports.nodes
    texts = sorted(link.rate.text for link in topo.links if link.rate)
    assert texts.count("1xHDR") == 1 and texts.count("4xEDR") == 1 and texts.count("4xHDR") == 30


def test_lonely_adapter_from_the_real_tool_is_refused() -> None:
    # the real ibnetdiscover exits 0 with this: one Ca record and no port
    text = IBSIM.joinpath("lonely-ibnetdiscover.txt").read_text()
    with pytest.raises(ParseError) as e:
        parse(text)
    assert e.value.line.startswith('Ca\t1 "H-0000000000100028"')
    assert e.value.line_no == text.splitlines().index(e.value.line) + 1
    with pytest.raises(ParseError, match="no port is connected"):
        parse(IBSIM.joinpath("lonely-ibnetdiscover-p.txt").read_text())


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no Switch or Ca record"),
        ("hello world\n", "not a line of ibnetdiscover output"),
        ('Switch\t8 "S-0000000000200000"\t\t# "x" base port 0 lid 0 lmc 0\n[1]\tbroken\n', "port"),
    ],
)
def test_garbage_is_a_parse_error(text: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_topology(text)


def test_truncated_dump_names_the_dangling_line() -> None:
    lines = NDR.read_text().splitlines()
    cut = "\n".join(lines[:200])  # records after this are gone; the leaves still name them
    with pytest.raises(ParseError) as e:
        parse(cut)
    assert "has no record" in e.value.reason
    assert lines[e.value.line_no - 1] == e.value.line


def test_unknown_ports_line_is_a_parse_error() -> None:
    text = PORTS.read_text().replace("4x EDR - SW  1719 11", "4x EDR ~ SW  1719 11", 1)
    with pytest.raises(ParseError) as e:
        parse_ports(text)
    assert e.value.line_no == 3


def test_rates_and_guids() -> None:
    assert parse_rate("4xNDR").gbps == 400
    assert parse_rate("4x HDR").gbps == 200
    assert parse_rate("2xHDR").gbps == 100
    assert parse_rate("1xHDR").gbps == 50
    assert parse_rate("4xFDR").gbps == 56
    assert parse_rate("4xFDR10").gbps == 40
    assert parse_rate("1xSDR").gbps == 2.5
    assert parse_rate("12xQDR").gbps == 120
    assert parse_rate("4x???").gbps is None
    assert parse_rate("4xNDR").text == "4xNDR"
    with pytest.raises(ValueError):
        parse_rate("fast")
    assert normalize_guid("100005") == "0x0000000000100005"
    assert normalize_guid("0x2C5EAB0300B87B40") == "0x2c5eab0300b87b40"


def test_crlf_and_space_separated_dump() -> None:
    text = IBSIM.joinpath("fat-tree-ibnetdiscover.txt").read_text()
    mangled = text.replace("\t", "    ").replace("\n", "\r\n")
    assert len(parse(mangled).links) == 32
