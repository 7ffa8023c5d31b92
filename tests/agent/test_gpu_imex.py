"""nvidia-imex-ctl -N parsing on the real AWS capture, through the command runner."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llmgw_agent.collectors import CommandResult, Roots
from llmgw_agent.collectors.gpu_imex import collect_imex, parse_imex_nodes, read_imex

from .fake_nvml import REALDATA

CAPTURE = (REALDATA / "nvidia-imex-ctl-N-aws-pcs.txt").read_text().split("\n", 1)[1]


def test_parse_the_aws_gb200_domain() -> None:
    got = parse_imex_nodes(CAPTURE)
    assert got["up"] is True and got["domain_state"] == "up"
    assert len(got["nodes"]) == 18
    assert got["nodes"][0] == {"index": 0, "address": "172.31.48.81", "status": "ready"}


def test_channels_counted_under_rootfs(tmp_path: Path) -> None:
    (tmp_path / "dev/nvidia-caps-imex-channels").mkdir(parents=True)
    (tmp_path / "dev/nvidia-caps-imex-channels/channel0").touch()
    seen: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> CommandResult:
        seen.append(argv)
        return CommandResult(0, CAPTURE, "")

    got = read_imex(Roots(rootfs=tmp_path, run=run))
    assert got is not None and got["channels"] == 1 and got["up"]
    assert seen == [["nvidia-imex-ctl", "-N"]]


def test_absent_binary_reports_nothing() -> None:
    def missing(argv: Sequence[str]) -> CommandResult:
        raise FileNotFoundError(argv[0])

    def wrapped_missing(argv: Sequence[str]) -> CommandResult:
        return CommandResult(1, "", "sudo: nvidia-imex-ctl: command not found")

    assert read_imex(Roots(run=missing)) is None
    assert collect_imex(Roots(run=wrapped_missing, memo={"clock": lambda: 0.0})) == {}


def test_daemon_down_is_reported_not_absent(tmp_path: Path) -> None:
    def down(argv: Sequence[str]) -> CommandResult:
        return CommandResult(1, "", "connect failed")

    got = read_imex(Roots(rootfs=tmp_path, run=down))
    assert got is not None and got["up"] is False and got["channels"] == 0
