"""A turn's failure: who gets which error (serving.turns)."""

from __future__ import annotations

from django.db import OperationalError

from llmgw.serving.turns import Turns, _Call


def test_the_database_away_fails_a_turn_whole_without_placing_each_alone():
    # Placed alone one after another, each call would wait out its own
    # timeout on a database that is not there.
    asked: list[list[str]] = []

    def place_many(names: list[str]) -> list[str]:
        asked.append(list(names))
        raise OperationalError("connection refused")

    batch = [_Call("a", alone=False), _Call("b", alone=False), _Call("c", alone=False)]
    Turns(place_many)._run(batch)
    assert asked == [["a", "b", "c"]]
    assert all(isinstance(c.error, OperationalError) for c in batch)


def test_a_turn_that_fails_otherwise_places_each_call_alone():
    def place_many(names: list[str]) -> list[str]:
        if "gone" in names:
            raise LookupError("no model named 'gone'")
        return [f"placed {n}" for n in names]

    batch = [_Call("a", alone=False), _Call("gone", alone=False), _Call("b", alone=False)]
    Turns(place_many)._run(batch)
    assert [c.outcome for c in batch] == ["placed a", None, "placed b"]
    assert isinstance(batch[1].error, LookupError)
