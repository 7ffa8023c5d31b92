"""The catalog bench/fleet.py places under: the example's, with the hall
capped for the fleet's size, or (--uncapped) with no cap on the hall, so
that the power check's share of a placement can be measured apart."""

from __future__ import annotations

import yaml

from bench import fleet


def test_the_hall_is_capped_for_the_fleet_unless_asked_not_to_be() -> None:
    capped = yaml.safe_load(fleet.catalog(3))["facility"]["budgets"]
    uncapped = yaml.safe_load(fleet.catalog(3, capped=False))["facility"]["budgets"]
    assert capped["room=hall1"] == fleet.HALL_W
    assert "room=hall1" not in uncapped
    # The rest of the example's caps stay.
    assert {k: v for k, v in capped.items() if k != "room=hall1"} == uncapped


def test_the_racks_held_model_is_in_both() -> None:
    for capped in (True, False):
        models = yaml.safe_load(fleet.catalog(12, capped))["models"]
        [held] = [m for m in models if m["name"] == fleet.RACK_MODEL]
        assert held["always_running"] == 12
