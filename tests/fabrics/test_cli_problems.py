"""Cabling problems (leaf-to-leaf cables, down uplinks) where an operator
reads them: ``llmgw fabric analyze`` and ``llmgw ctl fabrics``."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from llmgw.cli.ctl_fabrics import cmd_fabrics
from llmgw.fabrics.cli import analyze_main

from .data import IBSIM

# tests/fabrics/sites.py MISCABLED: leaf00 port 13 cabled to leaf03 port 13,
# leaf02's uplink to spine02 pulled.
MISCABLED_LINES = [
    "problem: leaf-to-leaf: leaf00 port 13 - leaf03 port 13",
    "problem: port-down: leaf02 port 9 - spine02 port 5",
]


@pytest.mark.parametrize("suffix", ["", "-p"])
def test_analyze_prints_each_problem_after_the_warnings(
    suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert analyze_main([str(IBSIM / f"miscabled-ibnetdiscover{suffix}.txt")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == MISCABLED_LINES
    assert not any(line.startswith("warning:") for line in out[-2:])


def test_a_healthy_fabric_prints_no_problem(capsys: pytest.CaptureFixture[str]) -> None:
    assert analyze_main([str(IBSIM / "healthy-two-uplinks-ibnetdiscover.txt")]) == 0
    assert "problem:" not in capsys.readouterr().out


class _Api:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def call(self, method: str, path: str) -> dict[str, Any]:
        assert (method, path) == ("GET", "/api/v1/fabrics")
        return self.data


def _fabric(identity: str, problems: list[str], summary: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "identity": identity,
        "kind": "infiniband",
        "names": ["ib-a"],
        "master": None,
        "subnet_managers": [],
        "active_ports": 8,
        "ports": 8,
        "down_ports": 0,
        "nodes": ["gpu-0"],
        "problems": [{"code": c, "message": f"{c} happened"} for c in problems],
        "master_changes": [],
        "map": None if summary is None else {"summary": summary},
    }


def test_ctl_problems_column_counts_the_maps_cabling_problems() -> None:
    data = {
        "fabrics": [
            _fabric("0xa", ["no_standby"], {"problems": 2}),
            _fabric("0xb", [], {"problems": 0}),
            _fabric("0xc", [], {"switches": 4}),  # a map stored before problems were counted
            _fabric("0xd", [], None),
        ],
        "warnings": [],
    }
    out = cmd_fabrics(_Api(data), argparse.Namespace(json=False)).splitlines()  # type: ignore[arg-type]
    assert out[0].split()[-1] == "PROBLEMS"
    assert [line.split()[-1] for line in out[1:5]] == ["no_standby,cabling:2", "-", "-", "-"]
    assert "0xa: 2 cabling problem(s) on the map" in "\n".join(out)
