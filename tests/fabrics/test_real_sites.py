"""The fabric map on fabrics as real sites have them, from the real
ibnetdiscover on ibsim: a spine upgrade half done, adapters named the ways
vendors and installers name them, storage leaves, and miscabling.

Each test runs its own ibsim on its own socket name in its own scratch
directory (see :mod:`tests.fabrics.ibsim`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from llmgw.fabrics.ibnetdiscover import parse
from llmgw.fabrics.topology import analyze

from .ibsim import Simulator, ibsim_tree, short_ends, write_net

pytestmark = [
    pytest.mark.ofed,
    pytest.mark.skipif(
        shutil.which("ibsim") is None,
        reason="ibsim not installed (apt-get install -y ibsim-utils infiniband-diags opensm)",
    ),
]


def _discover(tree_or_net: Any, tmp_path: Path, host: str = "node001 mlx5_0") -> list[str]:
    net = tmp_path / "net"
    if isinstance(tree_or_net, str):
        net.write_text(tree_or_net)
    else:
        write_net(tree_or_net, net)
    with Simulator(net, tmp_path) as sim:
        return [sim.run("ibnetdiscover", host=host), sim.run("ibnetdiscover", "-p", host=host)]


def _degraded(r: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {
        (d["a"]["description"], d["a"]["port"], d["b"]["description"], d["b"]["port"])
        + (d["rate_text"], d["expected_rate_text"])
        for d in r["degraded_links"]
    }


def test_two_spine_generations_are_not_degraded(tmp_path: Path) -> None:
    # spines 01 and 02 HDR, spine03 the older EDR: both rates correct by design.
    # Two cables really trained short, one to each generation.
    tree = ibsim_tree(
        spines=3,
        spine_rates={2: "4xEDR"},
        short_uplinks={(1, 2): "1xEDR"},
        short_adapter=None,
        miswire=None,
    )
    want = {
        ("leaf00", 7, "spine01", 1, "1xHDR", "4xHDR"),
        ("leaf01", 9, "spine03", 2, "1xEDR", "4xEDR"),
    }
    assert short_ends(tree) == {(a, ap) for a, ap, *_ in want}
    for text in _discover(tree, tmp_path):
        r = analyze(parse(text))
        assert _degraded(r) == want
        edr = [k for k in r["links"] if k["rate_text"] == "4xEDR"]
        assert len(edr) == 3 + 2  # leaf-spine03 and spine03-core


def test_adapters_named_as_vendors_and_installers_name_them(tmp_path: Path) -> None:
    names = {
        1: lambda d: f"dgx-a12 HCA-{d + 1}",  # DGX OS: HCA-N, 1-based
        2: lambda d: f"gpu-01 mlx5_{d}",
        3: lambda d: f"localhost mlx5_{d}",  # set before the hostname was
        4: lambda d: f"localhost mlx5_{d}",
        5: lambda d: f"HCA-{d + 1}",  # no hostname at all
    }
    per_node = (4, 4, 3, 2, 4, 3)
    descriptions = {
        (f"node{n:03d}", f"mlx5_{d}"): name(d)
        for n, name in names.items()
        for d in range(per_node[n - 1])
    }
    tree = ibsim_tree(
        adapters_per_node=per_node,
        short_uplink=None,
        short_adapter=None,
        miswire=(4, 1, 2),  # the second "localhost"'s mlx5_1 on rail 2's leaf
        descriptions=descriptions,
    )
    for text in _discover(tree, tmp_path, host="node006 mlx5_0"):
        r = analyze(parse(text))
        got = {a["description"]: (a["node"], a["device"], a["rail"]) for a in r["adapters"]}
        assert got["dgx-a12 HCA-1"] == ("dgx-a12", "HCA-1", 0)
        assert got["dgx-a12 HCA-4"] == ("dgx-a12", "HCA-4", 3)
        assert got["gpu-01 mlx5_3"] == ("gpu-01", "mlx5_3", 3)
        assert got["localhost mlx5_2"] == (None, "mlx5_2", 2)  # not one host "localhost"
        assert got["HCA-3"] == (None, "HCA-3", 2)
        assert got["node006 mlx5_2"] == ("node006", "mlx5_2", 2)
        leaf = {s["guid"]: s["description"] for s in r["switches"]}
        rail_of = {s["description"]: s["rail_index"] for s in r["switches"]}
        assert [rail_of[f"leaf0{i}"] for i in range(4)] == [0, 1, 2, 3]
        mis = [
            (m["node"], m["device"], m["rail"], leaf[m["leaf_guid"]], m["leaf_rail"])
            for m in r["rail_misalignment"]
        ]
        assert mis == [(None, "mlx5_1", 1, "leaf02", 2)]
        assert [leaf[g] for g in r["rail_misalignment"][0]["expected_leaf_guids"]] == ["leaf01"]
        assert r["summary"]["rail_optimised"] is True


@pytest.mark.parametrize("leaf_name", ["leaf04", "mgmt-sw01"])
def test_a_storage_leaf_raises_no_rail_warnings(tmp_path: Path, leaf_name: str) -> None:
    # stor01 has two adapters, stor02 and stor03 one: the leaf is mostly mlx5_0s,
    # but it is no second rail-0 leaf, and stor01's mlx5_1 is not misplaced
    tree = ibsim_tree(
        short_uplink=None,
        short_adapter=None,
        storage=(2, 1, 1),
        storage_leaf=leaf_name,
    )
    for text in _discover(tree, tmp_path):
        r = analyze(parse(text))
        leaf = {s["guid"]: s["description"] for s in r["switches"]}
        tiers = {s["description"]: (s["tier"], s["rail_index"]) for s in r["switches"]}
        assert tiers[leaf_name] == ("leaf", None)
        assert [tiers[f"leaf0{i}"] for i in range(4)] == [("leaf", i) for i in range(4)]
        mis = [(m["node"], m["device"], leaf[m["leaf_guid"]]) for m in r["rail_misalignment"]]
        assert mis == [("node003", "mlx5_1", "leaf02")]  # the one real miswiring
        stor = [a for a in r["adapters"] if (a["node"] or "").startswith("stor")]
        assert len(stor) == 4 and {leaf[a["leaf_guid"]] for a in stor} == {leaf_name}
        assert r["summary"]["rail_aligned_share"] == round(19 / 20, 4)


def test_leaf_to_leaf_cable_and_a_down_uplink_are_problems(tmp_path: Path) -> None:
    tree = ibsim_tree(
        spines=3,
        uplinks=2,
        short_uplink=None,
        short_adapter=None,
        miswire=None,
        leaf_links=((0, 3),),  # leaf00 port 13 - leaf03 port 13
        pulled_uplinks=((2, 1),),  # leaf02 port 9 - spine02 port 5: down
    )
    for text in _discover(tree, tmp_path):
        r = analyze(parse(text))
        got = {
            (p["code"], p["a"]["description"], p["a"]["port"], p["b"]["description"])
            + (p["b"]["port"],)
            for p in r["problems"]
        }
        assert got == {
            ("leaf-to-leaf", "leaf00", 13, "leaf03", 13),
            ("port-down", "leaf02", 9, "spine02", 5),
        }
        assert all(p["message"] for p in r["problems"])
        assert r["summary"]["problems"] == 2
        assert r["degraded_links"] == [] and r["rail_misalignment"] == []


def test_healthy_fabric_has_no_problems(tmp_path: Path) -> None:
    tree = ibsim_tree(spines=3, uplinks=2, short_uplink=None, short_adapter=None, miswire=None)
    for text in _discover(tree, tmp_path):
        assert analyze(parse(text))["problems"] == []
