"""The ib collector on a sysfs tree rebuilt from a real H100 node, and ibstat's real output."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.collectors import REGISTRY, CommandResult, Roots
from llmgw_agent.collectors import ib as ib_collector
from llmgw_agent.collectors.ib import carries, parse_ibstat
from llmgw_agent.collectors.ib_sysfs import parse_rate, read_ports
from llmgw_agent.config import parse_config
from llmgw_agent.payload import collect_heartbeat, roots_for

FIXTURE = Path(__file__).parent / "fixtures" / "sys-ib-h100"
REALDATA = Path(__file__).parents[1] / "data" / "realdata"
FABRICS = {"ib-a": ("mlx5_0", "mlx5_1"), "ib-b": ("mlx5_4/1",), "roce": ("mlx5_bond_0",)}


def _no_commands(argv: Sequence[str]) -> CommandResult:
    raise AssertionError(f"no command expected, ran {list(argv)}")


@pytest.fixture
def sysroot(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE / "sys", tmp_path / "sys")
    return tmp_path / "sys"


def _port_dir(sysroot: Path, dev: str, port: int = 1) -> Path:
    return sysroot / "class" / "infiniband" / dev / "ports" / str(port)


def test_fixture_is_what_the_generator_makes_of_the_capture(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen", FIXTURE / "generate.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = gen.generate(REALDATA / "sysfs-infiniband-h100-gpud.txt", tmp_path)
    made = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    kept = {
        p.relative_to(FIXTURE / "sys"): p.read_bytes()
        for p in (FIXTURE / "sys").rglob("*")
        if p.is_file()
    }
    assert made == kept and len(made) == 486
    assert (tmp_path / "SOURCE").read_text() == (FIXTURE / "SOURCE").read_text()
    assert (FIXTURE / "SOURCE").read_text().startswith("# SOURCE: github.com/leptonai/gpud")


def test_real_h100_ports_counters_in_bytes_and_missing_files_absent(sysroot: Path) -> None:
    ports = {p.key: p for p in read_ports(sysroot)}
    assert sorted(ports) == [f"mlx5_{i}/1" for i in (0, 1, 4, 5, 6, 7, 8, 9)] + ["mlx5_bond_0/1"]
    p = ports["mlx5_0/1"]
    assert (p.link_layer, p.state, p.phys_state) == ("InfiniBand", "ACTIVE", "LinkUp")
    assert (p.rate_gbps, p.rate_text) == (400, "4X NDR")
    assert p.counters["port_xmit_data"] == 230442669431839 * 4  # 4-byte words in sysfs
    assert p.counters["port_rcv_data"] == 230539874932483 * 4
    assert p.counters["excessive_buffer_overrun_errors"] == 15
    assert p.counters["port_rcv_errors"] == 14 and p.counters["VL15_dropped"] == 0
    assert "port_xmit_wait" not in p.counters  # not one the control plane keeps
    assert p.node_guid is None and p.port_guid is None  # the capture has no node_guid/gids
    bond = ports["mlx5_bond_0/1"]
    assert (bond.link_layer, bond.rate_gbps, bond.rate_text) == ("Ethernet", 200, "2X NDR")

    (_port_dir(sysroot, "mlx5_1") / "counters" / "symbol_error").unlink()
    again = {p.key: p for p in read_ports(sysroot)}
    assert "symbol_error" not in again["mlx5_1/1"].counters  # unknown, not zero
    assert again["mlx5_0/1"].counters["symbol_error"] == 0


def test_rate_with_and_without_unit() -> None:
    assert parse_rate("400 Gb/sec (4X NDR)") == (400, "4X NDR")
    assert parse_rate("400") == (400, None)  # ibstat: no unit
    assert parse_rate("2.5 Gb/sec (1X SDR)") == (2.5, "1X SDR")
    assert parse_rate("n/a") == (None, None) and parse_rate(None) == (None, None)


def test_guids_from_node_guid_and_gid0(sysroot: Path) -> None:
    # Values of the real CX-7 in ibstat-ndr-ib-deepep-issue303.txt, in sysfs's own format.
    dev = sysroot / "class" / "infiniband" / "mlx5_0"
    (dev / "node_guid").write_text("a088:c203:0074:cfda\n")
    (_port_dir(sysroot, "mlx5_0") / "gids").mkdir()
    (_port_dir(sysroot, "mlx5_0") / "gids" / "0").write_text(
        "fe80:0000:0000:0000:a088:c203:0074:cfda\n"
    )
    p = read_ports(sysroot)[0]
    assert (p.node_guid, p.port_guid) == ("0xa088c2030074cfda", "0xa088c2030074cfda")


def test_roce_network_from_the_v2_gid_and_the_netdev_prefix(sysroot: Path) -> None:
    pdir = _port_dir(sysroot, "mlx5_bond_0")
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (pdir / sub).mkdir(parents=True)
    gids = {
        0: ("fe80:0000:0000:0000:a288:c2ff:fead:eab8", "IB/RoCE v1"),
        1: ("fe80:0000:0000:0000:a288:c2ff:fead:eab8", "RoCE v2"),
        2: ("0000:0000:0000:0000:0000:ffff:0a01:0205", "IB/RoCE v1"),
        3: ("0000:0000:0000:0000:0000:ffff:0a01:0205", "RoCE v2"),
    }
    for i, (gid, kind) in gids.items():
        (pdir / "gids" / str(i)).write_text(gid + "\n")
        (pdir / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
        (pdir / "gid_attrs" / "ndevs" / str(i)).write_text("bond0\n")
    ran: list[list[str]] = []
    # `ip -j addr show dev bond0` in iproute2's own JSON shape (keys as printed here).
    answer = [{"ifindex": 7, "ifname": "bond0", "addr_info": [
        {"family": "inet", "local": "10.1.2.5", "prefixlen": 24, "scope": "global"},
        {"family": "inet6", "local": "fe80::a288:c2ff:fead:eab8", "prefixlen": 64}]}]  # fmt: skip

    def run(argv: Sequence[str]) -> CommandResult:
        ran.append(list(argv))
        return CommandResult(0, json.dumps(answer), "")

    roots = Roots(sys=sysroot, run=run, fabrics=FABRICS, clock=lambda: 0.0)
    data = ib_collector.collect(roots)
    bond = next(p for p in data["ports"] if p["device"] == "mlx5_bond_0")
    assert bond["roce_network"] == "10.1.2.0/24" and bond["fabric"] == "roce"
    assert bond["port_guid"] is None and bond["sm"] is None
    assert ran == [["ip", "-j", "addr", "show", "dev", "bond0"]]
    assert all("roce_network" not in p for p in data["ports"] if p["link_layer"] == "InfiniBand")


def test_fabrics_changed_once_and_a_pulled_cable_within_one_heartbeat(sysroot: Path) -> None:
    roots = Roots(sys=sysroot, run=_no_commands, fabrics=FABRICS, clock=lambda: 0.0)
    first = ib_collector.collect(roots)
    assert first["fabrics_changed"] is True
    assert first["fabrics_active"] == ["ib-a", "ib-b", "roce"]
    assert {p["device"]: p["fabric"] for p in first["ports"]}["mlx5_5"] is None
    second = ib_collector.collect(roots)
    assert "fabrics_changed" not in second and "fabrics_active" not in second

    # ib-a has two adapters: one pulled leaves it carried; ib-b's only port pulled does not.
    for dev in ("mlx5_0", "mlx5_4"):
        (_port_dir(sysroot, dev) / "state").write_text("1: DOWN\n")
        (_port_dir(sysroot, dev) / "phys_state").write_text("2: Polling\n")
    third = ib_collector.collect(roots)
    assert third["fabrics_changed"] is True and third["fabrics_active"] == ["ib-a", "roce"]
    # Up without a subnet manager: INIT and LinkUp, still no traffic.
    (_port_dir(sysroot, "mlx5_1") / "state").write_text("2: INIT\n")
    fourth = ib_collector.collect(roots)
    assert fourth["fabrics_active"] == ["roce"]
    assert next(p for p in fourth["ports"] if p["device"] == "mlx5_1")["state"] == "INIT"


def test_no_rdma_class_sends_no_ports(tmp_path: Path) -> None:
    roots = Roots(sys=tmp_path, run=_no_commands)
    assert ib_collector.collect(roots) == {}
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    assert ib_collector.collect(roots) == {"ports": []}


@pytest.mark.parametrize(
    ("name", "count", "first"),
    [
        ("ibstat-ndr-ib-deepep-issue303.txt", 2, ("mlx5_0", "ACTIVE", "LinkUp", 400, "InfiniBand")),
        ("ibstat-h100-all-active-gpud.txt", 12, ("mlx5_0", "ACTIVE", "LinkUp", 400, "Ethernet")),
        ("ibstat-a100-ibpanic-gpud.txt", 8, ("mlx5_0", "ACTIVE", "LinkUp", 200, "InfiniBand")),
    ],
)
def test_parse_ibstat_on_real_output(name: str, count: int, first: tuple[Any, ...]) -> None:
    ports = parse_ibstat((REALDATA / name).read_text())
    assert len(ports) == count
    p = ports[0]
    assert (p.device, p.state, p.phys_state, p.rate_gbps, p.link_layer) == first
    assert p.rate_text is None  # "Rate: 400": no unit, no width
    if p.link_layer == "InfiniBand":
        assert p.port_guid is not None and p.node_guid is not None
    else:
        assert p.port_guid is None  # RoCE: MAC-derived, names no IB port


def test_parse_ibstat_down_and_polling_ports() -> None:
    ports = parse_ibstat((REALDATA / "ibstat-h100-some-down-polling-gpud.txt").read_text())
    states = sorted({(p.state, p.phys_state) for p in ports}, key=str)
    assert states == [("ACTIVE", "LinkUp"), ("DOWN", "Disabled"), ("DOWN", "Polling")]
    fabrics = {"roce": tuple(p.device for p in ports if not p.active)}
    assert carries(ports, fabrics) == set()


def test_heartbeat_payload_carries_the_new_parts(sysroot: Path, tmp_path: Path) -> None:
    config = parse_config(
        "server_url: http://cp\ncredential_file: c\nnode: n1\n"
        "fabrics:\n  - {name: ib-a, adapters: [mlx5_0, mlx5_1]}\n",
        base=tmp_path,
    )
    roots = roots_for(config)
    assert roots.fabrics == {"ib-a": ("mlx5_0", "mlx5_1")}
    roots.sys = sysroot
    roots.run = lambda argv: CommandResult(255, "", "sminfo: iberror: failed: query")
    payload = collect_heartbeat(config, roots)
    assert payload.fabrics_changed is True and payload.fabrics_active == ["ib-a"]
    assert len(payload.ports) == 9 and payload.subnet_managers == []
    assert all(p.sm is None for p in payload.ports)
    names = [c.name for c in payload.collectors]
    assert names.index("sm") < names.index("ib")
    assert list(REGISTRY).index("sm") < list(REGISTRY).index("ib")
