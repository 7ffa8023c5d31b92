"""Waiting for a pooled connection (llmgw.database.queue), on the test
database with a pool of one connection and a 1 s pool timeout: a request
behind a connection that keeps getting answers waits its turn past the
pool's timeout; behind one that gets none (a hung or dead server), it
gives up at the pool's timeout as before.
tests/reliability/test_layout_faults.py sends 500 calls at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connections

from llmgw.database.base import DatabaseWrapper

pytestmark = pytest.mark.django_db

POOL_TIMEOUT_S = 1


@pytest.fixture
def small_pool(settings: Any) -> Iterator[dict[str, Any]]:
    settings.DATABASE_QUEUE_S = 10.0
    settings_dict = {
        **connections["default"].settings_dict,
        "OPTIONS": {
            **connections["default"].settings_dict["OPTIONS"],
            "pool": {"min_size": 1, "max_size": 1, "timeout": POOL_TIMEOUT_S},
        },
    }
    yield settings_dict
    DatabaseWrapper(settings_dict, alias="small-pool").close_pool()


def hold_the_connection(
    settings_dict: dict[str, Any], taken: threading.Event, held_s: float, answering: bool
) -> threading.Thread:
    """A thread that takes the pool's only connection for `held_s`, asking
    the database something every 0.1 s or nothing at all."""

    def run() -> None:
        held = DatabaseWrapper(settings_dict, alias="small-pool")
        held.ensure_connection()
        taken.set()
        until = time.monotonic() + held_s
        while time.monotonic() < until:
            if answering:
                with held.cursor() as cursor:
                    cursor.execute("SELECT 1")
            time.sleep(0.1)
        held.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def seconds_to_connect(settings_dict: dict[str, Any]) -> float:
    waiting = DatabaseWrapper(settings_dict, alias="small-pool")
    started = time.monotonic()
    try:
        waiting.ensure_connection()
        return time.monotonic() - started
    finally:
        waiting.close()


def test_a_request_waits_past_the_pool_timeout_while_the_database_answers(
    small_pool: dict[str, Any],
) -> None:
    taken = threading.Event()
    holder = hold_the_connection(small_pool, taken, 3.0, answering=True)
    assert taken.wait(10)
    waited = seconds_to_connect(small_pool)
    holder.join(10)
    assert POOL_TIMEOUT_S + 0.5 < waited < 3.0 + 2


def test_a_request_gives_up_at_the_pool_timeout_when_nothing_answers(
    small_pool: dict[str, Any],
) -> None:
    taken = threading.Event()
    holder = hold_the_connection(small_pool, taken, 6.0, answering=False)
    assert taken.wait(10)
    time.sleep(2.5)  # the holder's first statement, if any, is long past
    started = time.monotonic()
    with pytest.raises(OperationalError):
        seconds_to_connect(small_pool)
    assert time.monotonic() - started < POOL_TIMEOUT_S + 1
    holder.join(10)
