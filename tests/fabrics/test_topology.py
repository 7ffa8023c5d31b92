"""The analysis on the real DGX H100 NDR fabric, on real-tool dumps, and at scale."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from llmgw.fabrics.ibnetdiscover import parse
from llmgw.fabrics.topology import analyze, split_description
from llmgw.simulator.fat_tree import FatTree, numbered_hosts
from llmgw.simulator.ibnetdiscover_dump import dump

from .data import IBSIM, NDR, PORTS


@pytest.fixture(scope="module")
def ndr() -> dict[str, Any]:
    return analyze(parse(NDR.read_text()))


def test_ndr_tiers(ndr: dict[str, Any]) -> None:
    text = NDR.read_text()
    # independent: the switches name their role ("IBLEAF"/"IBSPINE") in the file
    names = re.findall(r'^Switch\t\d+ "S-([0-9a-f]+)"\t\t# "([^"]*)"', text, re.M)
    want = {"0x" + g: ("leaf" if "IBLEAF" in d else "spine") for g, d in names}
    assert Counter(want.values()) == {"leaf": 31, "spine": 9}
    got = {s["guid"]: s["tier"] for s in ndr["switches"]}
    assert got == want
    s = ndr["summary"]
    assert (s["switches"], s["leaf"], s["spine"], s["core"]) == (40, 31, 9, 0)
    # every spine carries a SHARP aggregation node; it must not make it a leaf
    assert (s["adapters"], s["host_adapters"], s["aggregation_nodes"]) == (582, 542, 40)
    assert (
        len(
            re.findall(
                r'^Ca\t1 "H-[0-9a-f]+"\t\t# "Mellanox Technologies Aggregation Node"', text, re.M
            )
        )
        == 40
    )
    spine = next(sw for sw in ndr["switches"] if sw["tier"] == "spine")
    assert spine["adapters"] == 0 and spine["ports"] == 65 and spine["hops"] == 1


def test_ndr_adapters(ndr: dict[str, Any]) -> None:
    by_guid = {a["guid"]: a for a in ndr["adapters"]}
    a = by_guid["0xe09d7303007a4bd8"]
    assert (a["node"], a["device"], a["device_number"]) == ("a08-p1-dgx-04-c01", "mlx5_5", 5)
    assert (a["leaf_guid"], a["leaf_port"], a["rate"], a["rate_text"]) == (
        "0x2c5eab0300b87b40",
        1,
        400,
        "4xNDR",
    )
    b = by_guid["0xe09d730300857d78"]
    assert (b["node"], b["device"], b["device_number"]) == ("a06-p1-dgx-02-c01", "HCA-6", 6)
    # a node that never set its description: no owner, but still an adapter on its leaf
    c = by_guid["0xe09d730300858d88"]
    assert c["description"] == "MT4129 ConnectX7   Mellanox Technologies"
    assert (c["node"], c["device"], c["role"]) == (None, None, "adapter")
    assert c["leaf_guid"] == "0x2c5eab0300b87bc0"
    agg = by_guid["0x2c5eab0300b87b50"]
    assert (agg["role"], agg["node"], agg["leaf_guid"]) == (
        "aggregation",
        None,
        "0x2c5eab0300b87b40",
    )
    # 69 vendor defaults, and "localhost HCA-1/2/6": a placeholder names no node
    assert sum(1 for a in ndr["adapters"] if a["role"] == "adapter" and a["node"] is None) == 72
    lh = next(a for a in ndr["adapters"] if a["description"] == "localhost HCA-2")
    assert (lh["node"], lh["device"], lh["rail"]) == (None, "HCA-2", 1)


def test_ndr_links_and_rates(ndr: dict[str, Any]) -> None:
    assert len(ndr["links"]) == 1114
    assert ndr["degraded_links"] == []
    kinds = Counter(link["kind"] for link in ndr["links"])
    assert kinds["adapter-leaf"] == 542
    assert kinds["aggregation-leaf"] == 31 and kinds["aggregation-spine"] == 9
    assert kinds["leaf-spine"] == 1114 - 542 - 40
    assert ndr["expected_rates"]["leaf-spine"] == {"rate": 400, "rate_text": "4xNDR"}


def test_ndr_down_uplinks(ndr: dict[str, Any]) -> None:
    # 31 leaves cabled twice to each of 9 spines would be 558 cables; the real
    # fabric has 532 up: each missing one is a down port on its leaf
    assert 31 * 9 * 2 - 532 == 26
    down = [p for p in ndr["problems"] if p["code"] == "port-down"]
    assert len(down) == len(ndr["problems"]) == ndr["summary"]["problems"] == 26
    assert all("IBLEAF" in p["a"]["description"] for p in down)
    assert all("IBSPINE" in p["b"]["description"] for p in down)
    ends = [(p["a"]["guid"], p["a"]["port"]) for p in down]
    assert None not in {port for _, port in ends} and len(set(ends)) == 26


def test_ndr_rails(ndr: dict[str, Any]) -> None:
    # found in the real fabric: one DGX with HCA-5/HCA-6 swapped, and two hosts
    # ("B11-P1-CUFM-02", "ubuntu") whose mlx5_0/mlx5_1 sit on rails 3 and 4's leaves
    got = {(m["node"], m["device"]): m for m in ndr["rail_misalignment"]}
    assert set(got) == {
        ("b08-p1-dgx-08-c01", "HCA-5"),
        ("b08-p1-dgx-08-c01", "HCA-6"),
        ("B11-P1-CUFM-02", "mlx5_0"),
        ("B11-P1-CUFM-02", "mlx5_1"),
        ("ubuntu", "mlx5_0"),
        ("ubuntu", "mlx5_1"),
    }
    desc = {s["guid"]: s["description"] for s in ndr["switches"]}
    swapped = got[("b08-p1-dgx-08-c01", "HCA-5")]
    assert "IBLEAF-04-08" in desc[swapped["leaf_guid"]] and swapped["leaf_carries"] == "HCA-6"
    # rail 4: the DGXs' HCA-5 leaves and IBLEAF-03-04, where the other hosts' mlx5_4 are
    assert sorted("IBLEAF-03" in desc[g] for g in swapped["expected_leaf_guids"]) == [True] * 7
    assert (swapped["rail"], swapped["leaf_rail"]) == (4, 5)
    assert ndr["summary"]["rail_optimised"] is True


def test_real_tool_dumps_find_the_faults() -> None:
    for name in (
        "fat-tree-ibnetdiscover.txt",
        "fat-tree-ibnetdiscover-p.txt",
        "fat-tree-ibnetdiscover-f.txt",
    ):
        r = analyze(parse(IBSIM.joinpath(name).read_text()))
        tiers = {s["description"]: s["tier"] for s in r["switches"]}
        assert tiers == {
            **{f"leaf0{i}": "leaf" for i in range(4)},
            "spine01": "spine",
            "spine02": "spine",
            "core01": "core",
            "core02": "core",
        }, name
        bad = {
            (d["a"]["description"], d["a"]["port"], d["b"]["description"], d["b"]["port"]): (
                d["rate_text"],
                d["expected_rate_text"],
                d["rate"],
                d["expected_rate"],
            )
            for d in r["degraded_links"]
        }
        assert bad == {
            ("leaf00", 7, "spine01", 1): ("1xHDR", "4xHDR", 50, 200),
            ("node004 mlx5_1", 1, "leaf01", 3): ("4xEDR", "4xHDR", 100, 200),
        }, name
        mis = r["rail_misalignment"]
        leaf = {s["guid"]: s["description"] for s in r["switches"]}
        assert [(m["node"], m["device"], leaf[m["leaf_guid"]]) for m in mis] == [
            ("node003", "mlx5_1", "leaf02")
        ], name
        assert [leaf[g] for g in mis[0]["expected_leaf_guids"]] == ["leaf01"]


def test_ports_sample_analysis() -> None:
    r = analyze(parse(PORTS.read_text()))
    tiers = {s["description"]: s["tier"] for s in r["switches"]}
    assert tiers["ib-i1l1s01"] == "leaf" and tiers["ib-i1l2s01"] == "spine"
    assert tiers["5FB0405-leaf-IB01"] == "leaf"
    # seen only as unconnected ports: no path to an adapter
    assert tiers["ib-i7l2s01"] == "unknown"
    agg = next(a for a in r["adapters"] if a["description"].endswith("Aggregation Node"))
    assert agg["role"] == "aggregation"


@pytest.mark.parametrize(
    ("desc", "want"),
    [
        ("host mlx5_3", ("host", "mlx5_3")),
        ("a06-p1-dgx-02-c01 HCA-6", ("a06-p1-dgx-02-c01", "HCA-6")),
        ("MT4129 ConnectX7   Mellanox Technologies", (None, None)),
        ("Mellanox Technologies Aggregation Node", (None, None)),
        ("node01", ("node01", None)),
        ("HCA-3", (None, "HCA-3")),
        ("localhost mlx5_0", (None, "mlx5_0")),
        ("dgx-a12 HCA-1", ("dgx-a12", "HCA-1")),
        ("gpu-01 mlx5_4", ("gpu-01", "mlx5_4")),
        ("", (None, None)),
        ("some long free text", (None, None)),
    ],
)
def test_split_description(desc: str, want: tuple[str | None, str | None]) -> None:
    assert split_description(desc) == want


def test_not_rail_optimised_reports_no_misalignment() -> None:
    # 64 nodes of 8 adapters, every adapter of 4 nodes on one leaf
    hosts = numbered_hosts([8] * 64)
    tree = FatTree("t", hosts, hosts_per_leaf=4, spines=4, rail_optimised=False)
    r = analyze(parse(dump(tree)))
    assert r["summary"]["rail_optimised"] is False
    assert r["rail_misalignment"] == []
    assert r["summary"]["leaf"] == 16 and r["summary"]["spine"] == 4


def test_degraded_needs_a_majority() -> None:
    tree = FatTree("t", numbered_hosts([4] * 64), hosts_per_leaf=32, spines=4)
    r = analyze(parse(dump(tree)))
    assert r["degraded_links"] == [] and r["summary"]["misaligned_rails"] == 0
    # retrain one leaf-spine cable, both ends, at 2x: found, and only it
    r = analyze(parse(dump(replace(tree, short={("uplink", 0, 0): "2xNDR"}))))
    assert [(d["kind"], d["rate"], d["expected_rate"]) for d in r["degraded_links"]] == [
        ("leaf-spine", 200, 400)
    ]
