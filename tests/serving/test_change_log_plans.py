"""Placement's readers of the change log read its index on the generic
plans placement runs on, however ANALYZE last saw the log.

A change of many nodes in one transaction leaves thousands of log rows
with one xid. Analysed then, the planner took each of the readers' tests
to match a large part of the log and planned a scan of all of it, for
every look and every check: `make bench-placement` fell from about 300
committed placements a second to 45. Each statement is planned here as
placement plans it (prepared, plan_cache_mode = force_generic_plan) on
such a log, and its plan must not scan serving_nodechange whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from django.db import connection, transaction

from llmgw.serving import checked, followed, warm_sql

# The bulk change is another transaction's, committed, as it would be.
pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 20_000

# Values for each statement's parameters: only the plan is read.
VALUES: dict[str, Any] = {
    "xmax": "1000000",
    "xip": "{}",
    "nodes": "{1,2}",
    "members": "{1,2}",
    "added": "{}",
    "watts": "{}",
    "undeclared": "{}",
    "domains": "{}",
}


def numbered(sql: str, positional: Sequence[str]) -> tuple[str, list[Any]]:
    """The statement with $1, $2 ... for its "%(name)s" markers and its
    "%s" ones (named by `positional`, in order), and a value for each, as
    PREPARE takes them."""
    order: list[str] = []
    names = iter(positional)

    def number(match: re.Match[str]) -> str:
        name = match.group(1) or next(names)
        if name not in order:
            order.append(name)
        return f"${order.index(name) + 1}"

    text = re.sub(r"%(?:\((\w+)\))?s", number, sql)
    return text, [VALUES.get(name, name) for name in order]


def generic_plan(sql: str, positional: Sequence[str] = ()) -> str:
    text, values = numbered(sql, positional)
    with transaction.atomic(), connection.cursor() as cursor:
        # As placement plans its statements: in a transaction with an id.
        cursor.execute("SELECT pg_current_xact_id()")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE reader AS {text}")
        try:
            literals = ", ".join(connection.ops.compose_sql("%s", [v]) for v in values)
            cursor.execute(f"EXPLAIN EXECUTE reader({literals})")
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE reader")


@pytest.fixture
def bulk_log() -> None:
    """ROWS log rows written by one transaction, then analysed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO serving_nodechange (node_id) SELECT g FROM generate_series(1, %s) g",
            [ROWS],
        )
        cursor.execute("ANALYZE serving_nodechange")


READERS = {
    "the warm fleet's look": (warm_sql.CHANGES, ["true", "xmax", "xip"]),
    "the watch for a whole-fleet change": (warm_sql.WHOLE_SINCE, ["xmax", "xip"]),
    "the check of each decision": (checked.CHECK, []),
    "the check of the power caps": (checked.POWER, []),
    "the engine catalog's check": (f"SELECT {followed.since(followed.ENGINE)}", ["xmax", "xip"]),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_of_the_log_reads_its_index_after_a_bulk_change(
    bulk_log: None, reader: str
) -> None:
    sql, positional = READERS[reader]
    plan = generic_plan(sql, positional)
    assert "serving_nodechange" in plan, plan
    assert not re.search(r"Seq Scan on serving_nodechange", plan), f"{reader}:\n{plan}"
