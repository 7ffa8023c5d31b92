"""The simulated fleet's facility labels: each rack stands in one row."""

from __future__ import annotations

from llmgw.simulator.fleet import make_fleet


def _rows_of_racks(count: int, trays: int) -> dict[str, set[str]]:
    rows: dict[str, set[str]] = {}
    for node in make_fleet(count, nvl72_trays=trays):
        labels = node.registration(10).labels
        rows.setdefault(labels["llmgw.io/rack"], set()).add(labels["llmgw.io/row"])
    return rows


def test_every_rack_is_in_one_row():
    rows = _rows_of_racks(12, 18)
    assert {rack: len(r) for rack, r in rows.items() if len(r) != 1} == {}
    # The NVL72 rack stands in a row of its own, after the dealt racks (two to a row).
    assert rows["nvl72-a"] == {"row03"}
    assert rows["r01"] == rows["r02"] == {"row01"} and rows["r03"] == {"row02"}


def test_racks_past_the_thousandth_node_keep_their_rows():
    rows = _rows_of_racks(1010, 0)
    assert rows["r251"] == rows["r252"] == {"row126"}
    assert rows["r253"] == {"row127"}
