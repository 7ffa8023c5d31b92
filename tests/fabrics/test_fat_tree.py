"""The fat-tree generator writes for ibsim what the captures were taken on."""

from __future__ import annotations

import pytest

from llmgw.simulator.ibsim_net import ibsim_rate, net_file

from .data import IBSIM
from .ibsim import ibsim_tree


def test_the_net_file_is_the_one_the_captures_were_taken_on() -> None:
    # capture() adds an adapter with no cable to the default tree
    lonely = '\nHca\t1 "lonely mlx5_0"\n\n'
    assert IBSIM.joinpath("fat-tree.net").read_text() == net_file(ibsim_tree()) + lonely


def test_ibsim_rates() -> None:
    assert [ibsim_rate(r) for r in ("4xHDR", "1xHDR", "4xEDR")] == [
        "w=2 e=4",
        "w=1 e=4",
        "w=2 e=2",
    ]
    with pytest.raises(ValueError, match="4xNDR"):
        ibsim_rate("4xNDR")  # ibsim hangs on NDR
