"""doctor on fabrics from the real GB200 snippets and H100/H200 captures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from llmgw_agent.collectors import CommandResult, Roots
from llmgw_agent.doctor import check_node, print_report, problems

from .fake_nvml import REALDATA, Card, fake, load_gb200_fabrics, load_smi_q

IMEX_UP = (REALDATA / "nvidia-imex-ctl-N-aws-pcs.txt").read_text().split("\n", 1)[1]


def node(
    cards: list[Card], rootfs: Path, imex: str | None = IMEX_UP, channel: bool = True
) -> Roots:
    if channel:
        (rootfs / "dev/nvidia-caps-imex-channels").mkdir(parents=True, exist_ok=True)
        (rootfs / "dev/nvidia-caps-imex-channels/channel0").touch()

    def run(argv: Sequence[str]) -> CommandResult:
        if imex is None:
            raise FileNotFoundError(argv[0])
        return CommandResult(0, imex, "")

    nvml = fake(*cards)
    return Roots(proc=Path("/nonexistent"), sys=Path("/nonexistent"), rootfs=rootfs, run=run,
                 nvml=lambda: nvml, memo={"clock": lambda: 0.0})  # fmt: skip


def gb200(which: str) -> Card:
    card = load_gb200_fabrics()[which]
    # The snippets carry only the Fabric section; an index is all doctor needs besides.
    return card


@pytest.mark.parametrize("capture", ["nvidia-smi-q-H200-thamada.txt",
                                     "nvidia-smi-q-H100x8-gpud-535.161.08.txt"])  # fmt: skip
def test_healthy_single_node_fabric_has_no_problem(capture: str, tmp_path: Path) -> None:
    found, _ = check_node(node(load_smi_q(capture), tmp_path, imex=None))
    assert found == []


def test_gb200_unhealthy_fabric(tmp_path: Path) -> None:
    found, _ = check_node(node([gb200("unhealthy")], tmp_path))
    assert [str(p) for p in found] == [
        p for p in map(str, found) if p.startswith("GPU 0: fabric health unhealthy")
    ] and len(found) == 1


def test_gb200_insufficient_resources(tmp_path: Path) -> None:
    found, _ = check_node(node([gb200("insufficient_resources")], tmp_path))
    assert len(found) == 1
    assert "status 'insufficient resources'" in found[0].problem
    assert "fabric manager" in found[0].action


def test_gb200_not_supported_state_is_no_fabric(tmp_path: Path) -> None:
    found, notes = check_node(node([gb200("not_supported")], tmp_path, imex=None))
    assert found == []


def test_multi_node_domain_needs_imex_and_a_channel(tmp_path: Path) -> None:
    card = gb200("unhealthy")  # ClusterUUID dc6e40c4-...: a multi-node domain
    found, _ = check_node(node([card], tmp_path, imex=None, channel=False))
    assert any(p.subject == "IMEX" and "not installed" in p.problem for p in found)
    found, _ = check_node(node([card], tmp_path / "b", channel=False))
    assert any("no IMEX channel" in p.problem for p in found)


def test_registration_in_progress_names_how_long_and_what_to_do() -> None:
    gpus = [{"index": 3, "fabric": {"state": "in_progress"}}]
    (p,) = problems(gpus, None, {3: 600.0})
    assert str(p) == (
        "GPU 3: fabric registration in progress for 10 min — check nvidia-fabricmanager "
        "on this tray: systemctl status nvidia-fabricmanager"
    )


def test_imex_node_not_ready() -> None:
    gpus = [{"index": 0, "fabric": {"state": "completed", "status": "success",
                                    "multi_node": True}}]  # fmt: skip
    imex = {"up": True, "nodes": [{"index": 4, "address": "172.31.50.39", "status": "lost"}],
            "channels": 1}  # fmt: skip
    (p,) = problems(gpus, imex)
    assert "node #4 172.31.50.39 is lost" in p.problem


def test_print_report_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert print_report(node([gb200("insufficient_resources")], tmp_path)) == 1
    assert "insufficient resources" in capsys.readouterr().out
    no_gpu = Roots(proc=Path("/nonexistent"), nvml=lambda: fake(present=False))
    assert print_report(no_gpu) == 0
    assert "not present: no NVIDIA GPU visible through NVML" in capsys.readouterr().out
