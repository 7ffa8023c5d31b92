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
