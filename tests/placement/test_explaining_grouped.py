"""An explanation's reasons said once each, by the server: the heading,
then each profile's reasons with how many nodes, the first three named
and one node's own words, the same whether the answer carries every node
or a few a reason (`?nodes=3`). `llmgw ctl explain` prints these lines and
the console draws the same groups."""

from __future__ import annotations

from typing import Any

from llmgw.placement.explaining import grouped, lines, shortened

TRAYS = [f"sim-gb200-t{n:02d}" for n in range(1, 19)]


def refused() -> dict[str, Any]:
    no_class = [
        {"node": t, "message": f"{t} has 0 H100-80GB GPUs, the profile needs 8"} for t in TRAYS
    ]
    cordoned = [{"node": "sim-h100-02", "message": "sim-h100-02 is cordoned: RMA"}]
    data: dict[str, Any] = {
        "model": "big",
        "decision": None,
        "attempts": [
            {
                "profile": "h100",
                "priority": 0,
                "placed": False,
                "reasons": [
                    {
                        "code": "no_gpu_of_class",
                        "summary": "no GPU of the class",
                        "count": 18,
                        "nodes": no_class,
                    },
                    {"code": "cordoned", "summary": "cordoned", "count": 1, "nodes": cordoned},
                ],
            }
        ],
    }
    heading = ["made 2026-12-06T03:00:00+00:00 (4m ago)"]
    return {**data, "lines": heading + lines(data)}


EXPECTED = [
    "made 2026-12-06T03:00:00+00:00 (4m ago)",
    "big: cannot be placed",
    "profile h100 (priority 0): does not fit",
    "  18 nodes: no GPU of the class (no_gpu_of_class): "
    "sim-gb200-t01, sim-gb200-t02, sim-gb200-t03 and 15 more",
    "    e.g. sim-gb200-t01 has 0 H100-80GB GPUs, the profile needs 8",
    "  1 node: cordoned (cordoned): sim-h100-02",
    "    e.g. sim-h100-02 is cordoned: RMA",
    "every node on a line of its own: llmgw ctl explain big --all",
]


def test_eighteen_trays_refused_for_one_reason_are_one_group() -> None:
    data = refused()
    assert len(data["lines"]) == 24  # a line per tray, before
    out = grouped(data)
    assert out["grouped"] == EXPECTED
    assert out["heading"] == EXPECTED[:2]
    # Every node is still there, for --all and for the console's "every node".
    assert out["lines"] == data["lines"]
    assert [r["count"] for r in out["attempts"][0]["reasons"]] == [18, 1]


def test_a_few_nodes_a_reason_group_as_every_node_does() -> None:
    short = grouped(shortened(refused(), 3))
    assert short["grouped"] == EXPECTED
    assert len(short["attempts"][0]["reasons"][0]["nodes"]) == 3


def test_no_hint_when_every_node_is_named() -> None:
    data = refused()
    reasons = data["attempts"][0]["reasons"]
    reasons[0] = {**reasons[0], "count": 2, "nodes": reasons[0]["nodes"][:2]}
    data["lines"] = data["lines"][:1] + lines(data)
    out = grouped(data)["grouped"]
    assert "  2 nodes: no GPU of the class (no_gpu_of_class): sim-gb200-t01, sim-gb200-t02" in out
    assert not [line for line in out if "--all" in line]


def test_lines_that_end_otherwise_are_shown_as_they_are() -> None:
    # A placement's own answer ends with where every node's reason is read.
    data = refused()
    data["lines"] = [*data["lines"], "every node's reason: llmgw ctl explain big"]
    out = grouped(data)
    assert out["grouped"] == out["heading"] == data["lines"]
