"""The fabric map on fabrics as real sites have them (tests/fabrics/sites.py),
from the real ibnetdiscover on ibsim. Each test runs its own ibsim on its own
socket name in its own scratch directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmgw.fabrics.ibnetdiscover import parse
from llmgw.fabrics.topology import analyze
from llmgw.simulator.ibsim_net import net_file

from .data import IBSIM
from .sites import SITES, Site, discover

pytestmark = [
    pytest.mark.ofed,
    pytest.mark.skipif(
        shutil.which("ibsim") is None,
        reason="ibsim not installed (apt-get install -y ibsim-utils infiniband-diags opensm)",
    ),
]


@pytest.mark.parametrize("site", SITES, ids=[s.name for s in SITES])
def test_real_ibnetdiscover_on_the_site(site: Site, tmp_path: Path) -> None:
    for text in discover(site, tmp_path):
        site.check(analyze(parse(text)))


@pytest.mark.parametrize("site", SITES, ids=[s.name for s in SITES])
def test_captures_were_taken_on_these_sites(site: Site) -> None:
    assert IBSIM.joinpath(f"{site.name}.net").read_text() == net_file(site.tree)
