"""``llmgw fabric analyze``: summary, --json, refusals, and ``python -m``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.fabrics.cli import analyze_main, main

from .data import IBSIM, NDR, NDR_BAD

ROOT = Path(__file__).resolve().parents[2]


def test_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert analyze_main([str(NDR)]) == 0
    out = capsys.readouterr().out
    assert "switches: 40 (leaf 31, spine 9, core 0)" in out
    assert "adapters: 582 (542 host, 40 SHARP aggregation nodes)" in out
    assert "degraded links: 0" in out
    assert "misaligned rails: 2 (and 4 adapters of UFM or management hosts, no rail members)" in out
    assert "b08-p1-dgx-08-c01 HCA-5" in out


def test_summary_names_degraded_links(capsys: pytest.CaptureFixture[str]) -> None:
    assert analyze_main([str(IBSIM / "fat-tree-ibnetdiscover.txt")]) == 0
    out = capsys.readouterr().out
    assert "degraded links: 2" in out
    assert (
        "leaf00 [7] - spine01 [1]: 1xHDR (50 Gb/s), leaf-spine links run at 4xHDR (200 Gb/s)" in out
    )
    assert "node003 mlx5_1: on leaf02 (a mlx5_2 leaf); expected leaf01" in out


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert analyze_main([str(NDR), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["switches"]) == 40 and len(data["adapters"]) == 582
    assert {"guid", "tier", "description", "ports"} <= set(data["switches"][0])
    assert {"guid", "node", "device", "leaf_guid", "rate"} <= set(data["adapters"][0])
    m = data["rail_misalignment"][0]
    assert {"node", "device", "leaf_guid", "expected_leaf_guids"} <= set(m)


def test_failed_discovery_exits_1_with_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert analyze_main([str(NDR_BAD)]) == 1
    err = capsys.readouterr().err
    assert f"{NDR_BAD}:11: adapter 0xb8e92403009ca838" in err
    assert "no connected port" in err


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert analyze_main([]) == 2
    assert analyze_main([str(tmp_path / "missing.txt")]) == 1
    assert main(["frobnicate"]) == 2


def test_python_dash_m() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmgw.fabrics.cli", "analyze", str(NDR), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["leaf"] == 31
