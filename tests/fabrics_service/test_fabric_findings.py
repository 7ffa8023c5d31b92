"""`llmgw ctl fabrics` names what is wrong: each down port by node and
adapter, and each finding of the fabric's map (a cable trained short, an
adapter off its rail, a leaf-to-leaf cable, a down uplink) by its switch,
port and node. Counts alone sent the operator to `--json`, which had only
counts too."""

from __future__ import annotations

import pytest
from django.utils import timezone

from llmgw.cli import ctl
from llmgw.fabrics import sweep
from llmgw.fabrics.ibnetdiscover import parse
from llmgw.fabrics.models import PhysicalFabric
from llmgw.fabrics.topology import analyze
from tests.fabrics.data import IBSIM
from tests.fabrics_service.test_physical_fabrics import MASTER, cluster  # noqa: F401
from tests.tokens import make_token


@pytest.mark.django_db(transaction=True)
def test_ctl_fabrics_names_each_down_port_and_each_finding_of_the_map(
    cluster,  # noqa: F811
    live_server,
    operator,
    monkeypatch,
    capsys,
):
    nodes = [cluster(f"gpu-{i}") for i in range(2)]
    for n in nodes:
        n.beat()
    nodes[1].pull("mlx5_4")
    nodes[1].beat(seconds=10)
    # The map as the sweep stores it, from the real ibnetdiscover on ibsim.
    dump = (IBSIM / "fat-tree-ibnetdiscover.txt").read_text()
    fabric = PhysicalFabric.objects.get(identity=MASTER)
    sweep.store_map(fabric, analyze(parse(dump)), timezone.now(), "gpu-0")

    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    assert ctl.main(["fabrics"]) == 0
    out = capsys.readouterr().out
    said = [line.removeprefix(f"{MASTER}: ") for line in out.splitlines()]
    assert "port down: gpu-1:mlx5_4/1 (DOWN, Polling)" in said, out
    assert (
        "degraded link: node004 mlx5_1 port 1 - leaf01 port 3 at 4xEDR (100 Gb/s), "
        "where its adapter-leaf links run at 4xHDR (200 Gb/s)"
    ) in said, out
    assert (
        "degraded link: leaf00 port 7 - spine01 port 1 at 1xHDR (50 Gb/s), "
        "where its leaf-spine links run at 4xHDR (200 Gb/s)"
    ) in said, out
    off = [line for line in said if line.startswith("off its rail: node003 mlx5_1 on leaf02 port ")]
    assert len(off) == 1 and off[0].endswith(", a mlx5_2 leaf"), out


@pytest.mark.django_db(transaction=True)
def test_ctl_fabrics_names_the_maps_cabling_problems_by_switch_and_port(
    cluster,  # noqa: F811
    live_server,
    operator,
    monkeypatch,
    capsys,
):
    cluster("gpu-0").beat()
    dump = (IBSIM / "miscabled-ibnetdiscover.txt").read_text()
    fabric = PhysicalFabric.objects.get(identity=MASTER)
    sweep.store_map(fabric, analyze(parse(dump)), timezone.now(), "gpu-0")
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    assert ctl.main(["fabrics"]) == 0
    out = capsys.readouterr().out
    assert f"{MASTER}: leaf-to-leaf: leaf00 port 13 - leaf03 port 13" in out, out
    assert f"{MASTER}: port-down: leaf02 port 9 - spine02 port 5" in out, out
