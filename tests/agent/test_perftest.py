"""The agent's ib_write_bw runner: the result table read by its heading on real
captured outputs, the RoCE v2 GID picked from sysfs, the command lines, perftest
installed on first use, and the server/client requests through a scripted runner."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from llmgw_agent import perftest
from llmgw_agent.collectors import CommandResult, Roots
from llmgw_agent.protocol import perftest as wire
from llmgw_agent.stream import COMMANDS, features

REALDATA = Path(__file__).parents[1] / "data" / "realdata"
NDR = REALDATA / "ib_write_bw-ndr-csegpu.txt"
ROCE = REALDATA / "ib_write_bw-nvidia-cloud-native-docs.txt"


def test_the_ndr_capture_is_read_past_the_warning_between_heading_and_row():
    reading = perftest.parse(NDR.read_text())
    assert (reading.bytes, reading.iterations, reading.unit) == (65536, 5000, "Gb/sec")
    assert (reading.bw_peak_gbps, reading.bw_average_gbps) == (392.38, 392.34)
    assert reading.msg_rate_mpps == pytest.approx(0.748336)


def test_a_size_sweep_reports_its_largest_message_on_roce():
    reading = perftest.parse(ROCE.read_text())
    assert (reading.bytes, reading.bw_average_gbps) == (8388608, 92.39)


def test_mb_per_sec_is_converted_from_perftests_binary_megabytes():
    # The same NDR run as perftest prints it without --report_gbits.
    text = NDR.read_text().replace("[Gb/sec]", "[MB/sec]").replace("392.34", "46771.05")
    reading = perftest.parse(text)
    assert reading.unit == "MB/sec"
    assert reading.bw_average_gbps == pytest.approx(392.34, abs=0.01)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Couldn't connect to 10.0.0.2:18515\n", "no result table"),
        (" #bytes  #iterations  BW peak[Gb/sec]\n 65536  5000  1.0\n", "no 'BW average'"),
        (" #bytes  BW average[furlongs]\n 65536  1.0\n", "unknown bandwidth unit"),
        (" #bytes     BW average[Gb/sec]\nwarning: something\n----\n", "no row"),
    ],
)
def test_output_without_a_usable_table_is_an_error_not_a_zero(text, says):
    with pytest.raises(perftest.ParseError, match=says):
        perftest.parse(text)


def sysfs(tmp: Path, device: str, link_layer: str, gids: dict[int, tuple[str, str]]) -> Roots:
    port = tmp / "class" / "infiniband" / device / "ports" / "1"
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "gids").mkdir()
    (port / "link_layer").write_text(link_layer + "\n")
    for index, (kind, gid) in gids.items():
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (port / "gids" / str(index)).write_text(gid + "\n")
    return Roots(sys=tmp)


ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
LINK_LOCAL = "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d"
V4 = "0000:0000:0000:0000:0000:ffff:c0a8:02e2"


def test_the_roce_v2_gid_with_an_ipv4_address_is_chosen(tmp_path):
    roots = sysfs(
        tmp_path,
        "mlx5_0",
        "Ethernet",
        {0: ("IB/RoCE v1", LINK_LOCAL), 1: ("RoCE v2", LINK_LOCAL), 2: ("IB/RoCE v1", V4),
         3: ("RoCE v2", V4), 4: ("RoCE v2", ZERO)},
    )  # fmt: skip
    assert perftest.gid_index(roots, "mlx5_0", 1) == 3


def test_an_infiniband_port_needs_no_gid_and_a_roce_port_without_v2_is_refused(tmp_path):
    assert (
        perftest.gid_index(sysfs(tmp_path / "ib", "mlx5_0", "InfiniBand", {}), "mlx5_0", 1) is None
    )
    roots = sysfs(tmp_path / "eth", "mlx5_1", "Ethernet", {0: ("IB/RoCE v1", V4)})
    with pytest.raises(RuntimeError, match="no RoCE v2 GID"):
        perftest.gid_index(roots, "mlx5_1", 1)
    with pytest.raises(RuntimeError, match="no such RDMA port"):
        perftest.gid_index(roots, "mlx5_9", 1)


def test_command_lines_name_device_port_gid_duration_and_size():
    args = wire.ClientArgs(device="mlx5_3", port=1, tcp_port=18600, duration_s=5, size=1048576,
                           server="10.0.0.2")  # fmt: skip
    assert perftest.argv(args, 3, args.server) == [
        "ib_write_bw", "-d", "mlx5_3", "-i", "1", "-p", "18600", "-D", "5", "-s", "1048576",
        "-F", "--report_gbits", "-x", "3", "10.0.0.2",
    ]  # fmt: skip


class Script:
    """A runner that answers ib_write_bw from a capture and records every call."""

    def __init__(self, *answers: CommandResult) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        return self.answers.pop(0)


def ib_roots(tmp_path: Path, run: Script) -> Roots:
    roots = sysfs(tmp_path / "sys", "mlx5_0", "InfiniBand", {})
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "apt-get").touch()
    roots.rootfs, roots.run = tmp_path, run
    return roots


def test_perftest_is_installed_on_first_use_and_the_client_reads_its_table(tmp_path):
    capture = NDR.read_text()
    run = Script(
        CommandResult(127, "", "env: 'ib_write_bw': No such file or directory"),
        CommandResult(0, "installed", ""),
        CommandResult(0, capture, ""),
    )
    out = perftest.client(
        ib_roots(tmp_path, run), {"device": "mlx5_0", "tcp_port": 18600, "server": "10.0.0.2"}
    )
    assert run.calls[1][-3:] == ["install", "-y", "perftest"]
    done = json.loads(out)
    assert done["reading"]["bw_average_gbps"] == 392.34
    assert done["gid_index"] is None and "simulated" in done


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    run = Script()
    with pytest.raises(ValueError, match="bad arguments"):
        perftest.client(ib_roots(tmp_path, run), {"device": "mlx5_0; reboot", "tcp_port": 18600,
                                                  "server": "10.0.0.2"})  # fmt: skip
    assert run.calls == []


def test_a_server_runs_in_the_background_and_its_stop_returns_its_reading(tmp_path):
    run = Script(CommandResult(0, NDR.read_text(), ""))
    roots = ib_roots(tmp_path, run)
    started = json.loads(perftest.server_start(roots, {"device": "mlx5_0", "tcp_port": 18601}))
    assert started["tcp_port"] == 18601
    stopped = json.loads(perftest.server_stop(roots, {"tcp_port": 18601}))
    assert stopped["finished"] and stopped["reading"]["bw_average_gbps"] == 392.34
    with pytest.raises(RuntimeError, match="no ib_write_bw server"):
        perftest.server_stop(roots, {"tcp_port": 18601})


def test_a_server_that_fails_at_once_says_why(tmp_path):
    run = Script(CommandResult(1, "", "Couldn't listen to port 18602"))
    with pytest.raises(RuntimeError, match="Couldn't listen"):
        perftest.server_start(ib_roots(tmp_path, run), {"device": "mlx5_0", "tcp_port": 18602})


def test_the_stream_answers_the_fabric_test_and_registration_lists_it():
    assert set(wire.KINDS) <= set(COMMANDS)
    assert set(wire.FEATURES) <= set(features())
