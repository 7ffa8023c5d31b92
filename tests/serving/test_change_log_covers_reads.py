"""Every column placement reads is logged by the triggers the warm fleet
follows, or is on the short list of those followed otherwise, with why.

The warm fleet (llmgw.serving.warm) reads a node again only when the log
says it changed: a column that placement starts to read and no trigger
logs would leave every process placing on what it last read. The columns
read are taken from the SQL node_views really runs, and the logged ones
from the triggers PostgreSQL really has."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from llmgw.inventory.models import Node
from llmgw.placement import snapshot
from tests import bulk_fleet

pytestmark = pytest.mark.django_db(transaction=True)

# A row's key, read to join rows, never a fact that changes in place.
KEYS = {"id", "node_id", "fabric_id", "model_id", "profile_id", "replica_id"}


def columns_read(nodes: list[int]) -> tuple[set[str], int]:
    with CaptureQueriesContext(connection) as queries:
        snapshot.node_views(only=nodes)
    read = {
        f"{table}.{column}"
        for q in queries.captured_queries
        for table, column in re.findall(r'"(\w+)"\."(\w+)"', q["sql"])
        if column not in KEYS
    }
    return read, len(queries.captured_queries)


def logged() -> tuple[dict[str, set[str] | None], set[str]]:
    """Per table, the columns whose update is logged (None: every update),
    and the tables whose inserts and deletes are."""
    updates: dict[str, set[str] | None] = {}
    rows: set[str] = set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgrelid::regclass::text, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgname LIKE '%%placement_change%%'"
        )
        for table, definition in cursor.fetchall():
            if "INSERT OR DELETE" in definition:
                rows.add(table)
            elif "AFTER UPDATE" in definition:
                when = definition.partition(" WHEN ")[2]
                updates[table] = set(re.findall(r"old\.(\w+)", when)) if when else None
    return updates, rows


def unlogged() -> set[str]:
    """The columns node_views reads that no trigger logs, less those
    followed otherwise."""
    read, _ = columns_read(list(Node.objects.values_list("pk", flat=True)))
    updates, rows = logged()
    out = set()
    for entry in read - set(snapshot.FOLLOWED_OTHERWISE):
        table, column = entry.split(".")
        columns = updates.get(table, set())
        if table not in rows or (columns is not None and column not in columns):
            out.add(entry)
    # Nothing on the list that placement no longer reads.
    assert set(snapshot.FOLLOWED_OTHERWISE) <= read, set(snapshot.FOLLOWED_OTHERWISE) - read
    return out


def test_every_column_placement_reads_is_logged_or_said_why_not():
    bulk_fleet.build(2, start=8)
    assert not unlogged(), (
        "placement reads columns no trigger logs: add them to the triggers (a serving "
        "migration) or to snapshot.FOLLOWED_OTHERWISE with the reason"
    )


def test_a_node_is_read_with_its_listed_columns_alone():
    # A column a view uses that is not in NODE_READS is loaded node by node
    # (Django fetches a deferred field when it is touched): the query count
    # would grow with the nodes read.
    bulk_fleet.build(6, start=8)
    pks = list(Node.objects.order_by("pk").values_list("pk", flat=True))
    _, two = columns_read(pks[:2])
    read, six = columns_read(pks)
    assert two == six
    node_columns = {e.split(".")[1] for e in read if e.startswith("inventory_node.")}
    assert node_columns == set(snapshot.NODE_READS) - KEYS


def test_the_check_fails_on_a_column_no_trigger_logs(monkeypatch):
    # The test above can fail: a column read that nothing logs.
    bulk_fleet.build(1, start=8)
    monkeypatch.setattr(snapshot, "NODE_READS", (*snapshot.NODE_READS, "kernel"))
    assert unlogged() == {"inventory_node.kernel"}
