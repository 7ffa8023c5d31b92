"""A fabric counts every port its nodes have on it, down ones included, and
every node: an operator reading `24/24` while 8 ports are dark is misled."""

from __future__ import annotations

import json

import pytest

from llmgw.cli import ctl
from llmgw.placement.snapshot import node_views
from tests.fabrics_service.test_physical_fabrics import MASTER, cluster  # noqa: F401
from tests.tokens import make_token

# The H100 node's InfiniBand adapters; its Ethernet bond is on no fabric.
IB = ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9")


@pytest.mark.django_db(transaction=True)
def test_ctl_fabrics_counts_down_ports_and_their_node(
    cluster,  # noqa: F811
    live_server,
    operator,
    monkeypatch,
    capsys,
):
    nodes = [cluster(f"gpu-{i}") for i in range(4)]
    for n in nodes:
        n.beat()
    dark = nodes[3]
    for device in IB:
        dark.pull(device)
    dark.beat(seconds=10)

    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    assert ctl.main(["fabrics"]) == 0
    out = capsys.readouterr().out.splitlines()
    header, row = out[0].split(), out[1].split()
    assert header == [
        "FABRIC",
        "KIND",
        "NAMES",
        "MASTER",
        "STANDBYS",
        "UP/PORTS",
        "DOWN",
        "NODES",
        "PROBLEMS",
    ]
    assert row[0] == MASTER
    assert dict(zip(header[5:8], row[5:8], strict=True)) == {
        "UP/PORTS": "24/32",
        "DOWN": "8",
        "NODES": "4",
    }

    assert ctl.main(["fabrics", "--json"]) == 0
    [fabric] = json.loads(capsys.readouterr().out)["fabrics"]
    assert (fabric["ports"], fabric["active_ports"], fabric["down_ports"]) == (32, 24, 8)
    assert fabric["nodes"] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_a_dark_node_stays_counted_but_is_never_placed_on_the_fabric(cluster):  # noqa: F811
    a, b = cluster("gpu-a"), cluster("gpu-b")
    a.beat(), b.beat()
    for device in IB:
        b.pull(device)
    b.beat(seconds=10)
    views = {v.name: v for v in node_views()}
    # Still counted on its fabric, yet placement sees no fabric on it: only
    # ports that are up carry a replica.
    assert views["gpu-a"].fabrics and not views["gpu-b"].fabrics
    # A cable back up is on its fabric again at once.
    for device in IB:
        port = b.sys / "class" / "infiniband" / device / "ports" / "1"
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
    b.beat(seconds=10)
    assert {v.name: bool(v.fabrics) for v in node_views()} == {"gpu-a": True, "gpu-b": True}


@pytest.mark.django_db(transaction=True)
def test_a_node_that_went_silent_is_counted_apart_on_its_fabric(
    cluster,  # noqa: F811
    live_server,
    operator,
    monkeypatch,
    capsys,
):
    """Seven minutes after a node died, its fabric still said every port
    up: its ports were counted as it last reported them."""
    from datetime import timedelta

    from django.utils import timezone

    from llmgw.inventory.models import Node

    nodes = [cluster(f"gpu-{i}") for i in range(4)]
    for n in nodes:
        n.beat()
    Node.objects.filter(name="gpu-2").update(
        last_heartbeat_at=timezone.now() - timedelta(minutes=7)
    )

    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    assert ctl.main(["fabrics", "--json"]) == 0
    [fabric] = json.loads(capsys.readouterr().out)["fabrics"]
    assert (fabric["ports"], fabric["active_ports"], fabric["down_ports"]) == (32, 24, 0)
    assert (fabric["not_ready_ports"], fabric["not_ready_nodes"]) == (8, ["gpu-2"])
    assert fabric["nodes"] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]

    assert ctl.main(["fabrics"]) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    up = header.index("UP/PORTS")
    nodes_at, problems_at = header.index("NODES"), header.index("PROBLEMS")
    assert row[up:].split()[0] == "24/32"
    assert row[nodes_at:problems_at].strip() == "4 (1 NotReady)"
    assert f"{MASTER}: 8 port(s) on NotReady node(s), counted neither up nor down: gpu-2" in out, (
        out
    )
