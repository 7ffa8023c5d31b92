"""`llmgw simulate` started while the database does not answer: the
reliability suite's fleet, started again while a loaded PostgreSQL could
not hand out a connection in 10 s, exited, and its nodes never came back."""

from __future__ import annotations

import logging

import pytest
from django.db import OperationalError

from llmgw.cli import simulate
from llmgw.simulator.fleet import SimNode, make_fleet


@pytest.mark.django_db(transaction=True)
def test_a_fleet_started_while_the_database_is_away_waits_for_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fleet = make_fleet(2, "waits", nvl72_trays=0)
    real, tries = simulate._identities, []

    def away_once(sims: list[SimNode]) -> list[tuple[str, str] | None]:
        tries.append(len(sims))
        if len(tries) == 1:
            raise OperationalError("couldn't get a connection after 10.00 sec")
        return real(sims)

    monkeypatch.setattr(simulate, "_identities", away_once)
    with caplog.at_level(logging.WARNING, logger="llmgw.simulate"):
        found = simulate._identities_retried(fleet, retry=True)
    assert tries == [2, 2]
    assert [what[0] for what in found if what is not None] == ["token", "token"]
    assert "could not read the inventory (couldn't get a connection" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_single_run_says_the_database_is_away(monkeypatch: pytest.MonkeyPatch) -> None:
    """--once is one look, not a wait."""

    def away(sims: list[SimNode]) -> list[tuple[str, str] | None]:
        raise OperationalError("couldn't get a connection after 10.00 sec")

    monkeypatch.setattr(simulate, "_identities", away)
    with pytest.raises(OperationalError):
        simulate._identities_retried(make_fleet(1, "once", nvl72_trays=0), retry=False)
