"""The text format llmgw writes itself, read back by prometheus-client's
parser: escaping, numbers, and label checks."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.metrics.text import Family, render


def parsed(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_label_values_are_escaped_and_numbers_read_back():
    f = Family("llmgw_x", "A doc with a \\ and a\nnewline", ["node", "mount"])
    f.add_metric(['we"ird\\name', "/a\nb"], 3)
    f.add_metric(["n", "/"], 2.5)
    f.add_metric(["n", "/big"], 85520809984)
    f.add_metric(["n", "/nan"], math.nan)
    f.add_metric(["n", "/inf"], math.inf)
    f.add_metric(["n", "/ninf"], -math.inf)
    f.add_metric(["n", "/true"], True)
    bare = Family("llmgw_y", "No labels")
    bare.add_metric([], 1e-07)
    got = parsed(render([f, bare]))
    assert got[("llmgw_x", (("mount", "/a\nb"), ("node", 'we"ird\\name')))] == 3
    assert got[("llmgw_x", (("mount", "/"), ("node", "n")))] == 2.5
    assert got[("llmgw_x", (("mount", "/big"), ("node", "n")))] == 85520809984
    assert math.isnan(got[("llmgw_x", (("mount", "/nan"), ("node", "n")))])
    assert got[("llmgw_x", (("mount", "/inf"), ("node", "n")))] == math.inf
    assert got[("llmgw_x", (("mount", "/ninf"), ("node", "n")))] == -math.inf
    assert got[("llmgw_x", (("mount", "/true"), ("node", "n")))] == 1
    assert got[("llmgw_y", ())] == 1e-07
    assert "# HELP llmgw_x A doc with a \\\\ and a\\nnewline\n# TYPE llmgw_x gauge\n" in render([f])


def test_an_empty_family_still_says_what_it_is():
    assert render([Family("llmgw_z", "Nothing yet", ["node"])]) == (
        "# HELP llmgw_z Nothing yet\n# TYPE llmgw_z gauge\n"
    )


def test_bad_names_and_label_counts_are_refused():
    with pytest.raises(ValueError, match="not a metric name"):
        Family("llmgw-x", "d")
    with pytest.raises(ValueError, match="not a label name"):
        Family("llmgw_x", "d", ["__reserved"])
    with pytest.raises(ValueError, match="not a label name"):
        Family("llmgw_x", "d", ["a-b"])
    with pytest.raises(ValueError, match="2 label values wanted, got 1"):
        Family("llmgw_x", "d", ["a", "b"]).add_metric(["only"], 1)
