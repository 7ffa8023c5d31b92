"""The sites of tests/fabrics/sites.py, from the dumps the real ibnetdiscover
printed for them on ibsim (kept under tests/data/ibsim): runs without ibsim."""

from __future__ import annotations

import pytest

from llmgw.fabrics.ibnetdiscover import parse
from llmgw.fabrics.topology import analyze

from .data import IBSIM
from .sites import SITES, Site


@pytest.mark.parametrize("suffix", ["", "-p"])
@pytest.mark.parametrize("site", SITES, ids=[s.name for s in SITES])
def test_captured_dump(site: Site, suffix: str) -> None:
    text = IBSIM.joinpath(f"{site.name}-ibnetdiscover{suffix}.txt").read_text()
    assert text.startswith("# SOURCE: real `ibnetdiscover")
    site.check(analyze(parse(text)))
