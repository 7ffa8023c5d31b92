"""The real ibnetdiscover against ibsim fabrics: what the analysis must find.

Needs the Debian packages ibsim-utils, infiniband-diags and opensm; skipped
only when the ibsim binary is missing. Each test runs its own ibsim on its
own socket name in its own scratch directory and stops it by PID.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from llmgw.fabrics.ibnetdiscover import ParseError, parse
from llmgw.fabrics.topology import analyze

from .ibsim import Simulator, ibsim_tree, miswired, short_ends, tiers, write_net

pytestmark = [
    pytest.mark.ofed,
    pytest.mark.skipif(
        shutil.which("ibsim") is None,
        reason="ibsim not installed (apt-get install -y ibsim-utils infiniband-diags opensm)",
    ),
]


def _faults(
    r: dict[str, Any],
) -> tuple[dict[str, str], set[tuple[Any, ...]], list[tuple[str, str, str]]]:
    tiers = {s["description"]: s["tier"] for s in r["switches"]}
    bad = {
        (
            d["a"]["description"],
            d["a"]["port"],
            d["b"]["description"],
            d["b"]["port"],
            d["rate_text"],
        )
        for d in r["degraded_links"]
    }
    leaf = {s["guid"]: s["description"] for s in r["switches"]}
    mis = [(m["node"], m["device"], leaf[m["leaf_guid"]]) for m in r["rail_misalignment"]]
    return tiers, bad, mis


def test_real_ibnetdiscover_finds_short_cables_and_a_miswired_rail(tmp_path: Path) -> None:
    tree = ibsim_tree()
    with Simulator(write_net(tree, tmp_path / "net"), tmp_path) as sim:
        topo = sim.run("ibnetdiscover")
        ports = sim.run("ibnetdiscover", "-p")
    want_tiers = tiers(tree)
    assert sorted(want_tiers.values()) == ["core"] * 2 + ["leaf"] * 4 + ["spine"] * 2
    want_bad = {
        ("leaf00", 7, "spine01", 1, "1xHDR"),  # w=1 on both ends
        ("node004 mlx5_1", 1, "leaf01", 3, "4xEDR"),  # e=2 on both ends
    }
    assert short_ends(tree) == {(a, ap) for a, ap, *_ in want_bad}
    for text in (topo, ports):
        r = analyze(parse(text))
        got_tiers, bad, mis = _faults(r)
        assert got_tiers == want_tiers
        assert bad == want_bad
        assert mis == miswired(tree) == [("node003", "mlx5_1", "leaf02")]
        assert r["summary"]["adapters"] == sum(h.adapters for h in tree.hosts) == 20
        assert r["summary"]["links"] == 32
    # the two formats name a CA differently: node GUID vs port GUID
    a_topo = {a["description"]: a for a in analyze(parse(topo))["adapters"]}
    a_ports = {a["description"]: a for a in analyze(parse(ports))["adapters"]}
    one = "node001 mlx5_0"
    assert a_topo[one]["port_guids"]["1"] == a_ports[one]["guid"] != a_topo[one]["guid"]


def test_healthy_two_uplink_fabric_has_no_findings(tmp_path: Path) -> None:
    tree = ibsim_tree(
        adapters_per_node=(2, 3, 4, 4, 2, 3, 4),
        spines=3,
        cores=1,
        uplinks=2,
        short_uplink=None,
        short_adapter=None,
        miswire=None,
    )
    write_net(tree, tmp_path / "net")
    with Simulator(tmp_path / "net", tmp_path) as sim:
        r = analyze(parse(sim.run("ibnetdiscover", host="node005 mlx5_1")))
    s = r["summary"]
    assert (s["leaf"], s["spine"], s["core"]) == (4, 3, 1)
    assert s["adapters"] == 22
    assert r["degraded_links"] == [] and r["rail_misalignment"] == []
    assert r["expected_rates"]["leaf-spine"] == {"rate": 200, "rate_text": "4xHDR"}


def test_adapter_with_no_cable_is_refused(tmp_path: Path) -> None:
    write_net(ibsim_tree(), tmp_path / "net")
    with open(tmp_path / "net", "a") as fh:
        fh.write('\nHca\t1 "lonely mlx5_0"\n\n')
    with Simulator(tmp_path / "net", tmp_path) as sim:
        topo = sim.run("ibnetdiscover", host="lonely mlx5_0")  # exits 0
        ports = sim.run("ibnetdiscover", "-p", host="lonely mlx5_0")
    with pytest.raises(ParseError, match="no connected port") as e:
        parse(topo)
    assert e.value.line == topo.splitlines()[e.value.line_no - 1]
    with pytest.raises(ParseError, match="no port is connected"):
        parse(ports)
