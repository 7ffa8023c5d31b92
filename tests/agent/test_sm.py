"""sminfo and saquery SMIR parsing on real output, the sm collector's cadence and its
installing infiniband-diags, and the fabric identity rule."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from llmgw_agent.collectors import CommandResult, Roots, make_runner
from llmgw_agent.collectors import ib as ib_collector
from llmgw_agent.collectors import sm as sm_collector
from llmgw_agent.collectors.sm import MISSING_NOTICE, parse_sminfo, parse_smir
from llmgw_agent.protocol.fabric_identity import fabric_identity, normalize_guid, remember

FIXTURE = Path(__file__).parent / "fixtures" / "sys-ib-h100"
REALDATA = Path(__file__).parents[1] / "data" / "realdata"
# Printed by the real `sminfo` and `saquery SMIR` (infiniband-diags 44.0) under ibsim with
# two real OpenSM 3.3.23, as seen in tests/agent/test_ib_ofed.py.
SMINFO_IBSIM = (
    "sminfo: sm lid 1 sm guid 0x100001, activity count 104 priority 10 state 3 SMINFO_MASTER\n"
)
SMIR_IBSIM = """SMInfoRecord dump:
\t\tRID
\t\tLID...................3
\t\tSMInfo dump:
\t\tGUID..................0x0000000000100001
\t\tSM_Key................0x0000000000000000
\t\tActCount..............88
\t\tPriority..............10
\t\tSMState...............3
SMInfoRecord dump:
\t\tRID
\t\tLID...................1
\t\tSMInfo dump:
\t\tGUID..................0x0000000000100003
\t\tSM_Key................0x0000000000000000
\t\tActCount..............141
\t\tPriority..............5
\t\tSMState...............2
"""


def test_sminfo_on_real_captures_pads_the_guid() -> None:
    ompi = (REALDATA / "sminfo-ompi-mailinglist-2009.txt").read_text()
    assert parse_sminfo(ompi) == {
        "guid": "0x0002c90200259201",
        "lid": 2,
        "priority": 0,
        "state": "MASTER",
    }
    oracle = (REALDATA / "sminfo-oracle-bda-ariadnipap.txt").read_text()
    assert parse_sminfo(oracle) == {
        "guid": "0x0010e0406d5aa0a0",
        "lid": 15,
        "priority": 14,
        "state": "MASTER",
    }
    assert parse_sminfo(SMINFO_IBSIM)["guid"] == "0x0000000000100001"  # type: ignore[index]
    assert parse_sminfo("sminfo: iberror: failed: query\n") is None


def test_smir_lists_every_manager() -> None:
    assert parse_smir(SMIR_IBSIM) == [
        {"guid": "0x0000000000100001", "lid": 3, "priority": 10, "state": "MASTER"},
        {"guid": "0x0000000000100003", "lid": 1, "priority": 5, "state": "STANDBY"},
    ]
    assert parse_smir("") == []


def test_identity_is_the_lowest_guid_and_survives_a_failover() -> None:
    both = parse_smir(SMIR_IBSIM)
    identity, known = remember(both)
    assert identity == "0x0000000000100001"
    survivor = [both[1]]
    assert fabric_identity(survivor) == "0x0000000000100003"  # the naive rule renames it
    assert fabric_identity(survivor, known) == identity
    assert fabric_identity(["0x2", "0X1"]) == "0x0000000000000001"
    assert normalize_guid("a088:c203:0074:cfda") == "0xa088c2030074cfda"
    with pytest.raises(ValueError):
        fabric_identity([])


class FakeRunner:
    """Answers like the real tools; records every command. Never runs anything."""

    def __init__(self, missing: bool = False) -> None:
        self.missing = missing
        self.ran: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.ran.append(list(argv))
        if argv[0] in ("sminfo", "saquery") and self.missing:
            raise FileNotFoundError(argv[0])
        if argv[0] == "sminfo":
            return CommandResult(0, SMINFO_IBSIM, "")
        if argv[0] == "saquery":
            return CommandResult(0, SMIR_IBSIM, "")
        return CommandResult(0, "", "")


@pytest.fixture
def node(tmp_path: Path) -> Roots:
    shutil.copytree(FIXTURE / "sys", tmp_path / "sys")
    (tmp_path / "root" / "usr" / "bin").mkdir(parents=True)
    clock = {"now": 1000.0}
    roots = Roots(
        sys=tmp_path / "sys", rootfs=tmp_path / "root", run=FakeRunner(), clock=lambda: clock["now"]
    )
    roots.memo["test.clock"] = clock
    return roots


def _advance(roots: Roots, seconds: float) -> None:
    roots.memo["test.clock"]["now"] += seconds


def test_once_a_minute_one_saquery_per_master_and_ports_carry_it(node: Roots) -> None:
    runner = node.run
    assert isinstance(runner, FakeRunner)
    data = sm_collector.collect(node)
    sminfo = [c for c in runner.ran if c[0] == "sminfo"]
    assert len(sminfo) == 8 and sminfo[0] == ["sminfo", "-C", "mlx5_0", "-P", "1"]
    assert [c for c in runner.ran if c[0] == "saquery"] == [
        ["saquery", "-C", "mlx5_0", "-P", "1", "SMIR"]
    ]
    (listing,) = data["subnet_managers"]
    assert listing["port"] == "mlx5_0/1" and listing["master"] == "0x0000000000100001"
    assert len(listing["managers"]) == 2
    ports = {p["device"]: p for p in ib_collector.collect(node)["ports"]}
    assert ports["mlx5_9"]["sm"] == {
        "guid": "0x0000000000100001",
        "lid": 1,
        "priority": 10,
        "state": "MASTER",
    }
    assert ports["mlx5_bond_0"]["sm"] is None  # RoCE: no subnet manager

    runner.ran.clear()
    _advance(node, 30)
    assert sm_collector.collect(node) == {} and runner.ran == []
    _advance(node, 31)
    assert "subnet_managers" in sm_collector.collect(node)


def test_missing_sminfo_installs_infiniband_diags_at_most_hourly(node: Roots) -> None:
    runner = FakeRunner(missing=True)
    node.run = runner
    (node.rootfs / "usr" / "bin" / "apt-get").touch()
    data = sm_collector.collect(node)
    assert data["notices"] == [MISSING_NOTICE]
    assert runner.ran[-1] == [
        "env",
        "DEBIAN_FRONTEND=noninteractive",
        "apt-get",
        "install",
        "-y",
        "infiniband-diags",
    ]
    for _ in range(3):
        runner.ran.clear()
        _advance(node, 61)
        assert "notices" not in sm_collector.collect(node)
        assert not [c for c in runner.ran if "install" in c]
    _advance(node, 3600)
    assert sm_collector.collect(node)["notices"] == [MISSING_NOTICE]


def test_dnf_and_no_package_manager(node: Roots) -> None:
    runner = FakeRunner(missing=True)
    node.run = runner
    sm_collector.collect(node)
    assert "install" not in sum(runner.ran, [])
    _advance(node, 3601)
    (node.rootfs / "usr" / "bin" / "dnf").touch()
    assert sm_collector.collect(node)["notices"] == [MISSING_NOTICE]
    assert runner.ran[-1] == ["dnf", "install", "-y", "infiniband-diags"]


def test_install_goes_through_the_command_wrapper(node: Roots, tmp_path: Path) -> None:
    # A wrapper that logs what it was asked to run and answers "not found" (127) to
    # everything: nothing is installed, but the real runner and wrapper are exercised.
    log = tmp_path / "wrapper.log"
    node.run = make_runner(["sh", "-c", f'echo "$*" >> {log}; exit 127', "wrap"])
    (node.rootfs / "usr" / "bin" / "apt-get").touch()
    notices = sm_collector.collect(node)["notices"]
    assert notices[0] == MISSING_NOTICE and notices[1].startswith(
        "installing infiniband-diags failed: exit 127"
    )
    assert log.read_text().splitlines() == [
        "sminfo -C mlx5_0 -P 1",
        "env DEBIAN_FRONTEND=noninteractive apt-get install -y infiniband-diags",
    ]


def test_roce_only_or_no_adapters_runs_nothing(tmp_path: Path) -> None:
    runner = FakeRunner()
    assert sm_collector.collect(Roots(sys=tmp_path, run=runner)) == {}
    dev = tmp_path / "class" / "infiniband" / "mlx5_bond_0" / "ports" / "1"
    dev.mkdir(parents=True)
    (dev / "link_layer").write_text("Ethernet\n")
    (dev / "state").write_text("4: ACTIVE\n")
    (dev / "phys_state").write_text("5: LinkUp\n")
    assert sm_collector.collect(Roots(sys=tmp_path, run=runner)) == {} and runner.ran == []


def test_no_active_port_still_checks_that_sminfo_exists(node: Roots) -> None:
    for d in (node.sys / "class" / "infiniband").iterdir():
        (d / "ports" / "1" / "state").write_text("2: INIT\n")
    runner = node.run
    assert isinstance(runner, FakeRunner)
    assert sm_collector.collect(node) == {}
    assert runner.ran == [["sminfo", "-V"]]
