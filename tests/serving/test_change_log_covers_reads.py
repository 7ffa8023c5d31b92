"""Every column a copy placement keeps reads is logged by the triggers of
the kind that copy follows (llmgw.serving.followed.READERS), or is on the
short list of those followed otherwise, with why.

The warm fleet (llmgw.serving.warm) reads a node again only when the log
says it changed, and the engine catalog (llmgw.serving.desired) only when
an engine did: a column that a reader starts to read and no trigger of its
kind logs would leave every process using what it last read. The columns
read are taken from the SQL each reader really runs, and the logged ones
from the triggers PostgreSQL really has."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from llmgw.catalog.models import Engine, Model, Profile
from llmgw.inventory.models import Node
from llmgw.placement import snapshot
from llmgw.serving import desired, followed
from tests import bulk_fleet

pytestmark = pytest.mark.django_db(transaction=True)

# A row's key, read to join rows, never a fact that changes in place.
KEYS = {"id", "node_id", "fabric_id", "model_id", "profile_id", "replica_id"}


def captured(read: Callable[[], object]) -> tuple[set[str], int]:
    """The columns (table.column) the read's SQL names, keys aside, and
    how many queries it ran."""
    with CaptureQueriesContext(connection) as queries:
        read()
    read_columns = {
        f"{table}.{column}"
        for q in queries.captured_queries
        for table, column in re.findall(r'"(\w+)"\."(\w+)"', q["sql"])
        if column not in KEYS
    }
    return read_columns, len(queries.captured_queries)


def columns_read(nodes: list[int]) -> tuple[set[str], int]:
    return captured(lambda: snapshot.node_views(only=nodes))


def named(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# The trigger functions and the kind of log row each writes: the node
# function writes 'node' rows; the other, the kind its trigger names.
KIND = re.compile(r"serving_note_(node_)?change\('([^']*)'\)")


def logged(kind: str) -> tuple[dict[str, set[str] | None], set[str]]:
    """Per table, the columns whose update writes a row of this kind (None:
    every update), and the tables whose inserts and deletes do."""
    updates: dict[str, set[str] | None] = {}
    rows: set[str] = set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgrelid::regclass::text, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgname LIKE '%%placement_change%%'"
        )
        for table, definition in cursor.fetchall():
            found = KIND.search(definition)
            assert found, definition
            if (followed.NODE if found.group(1) else found.group(2)) != kind:
                continue
            if "INSERT OR DELETE" in definition:
                rows.add(table)
            elif "AFTER UPDATE" in definition:
                when = definition.partition(" WHEN ")[2]
                updates[table] = set(re.findall(r"old\.(\w+)", when)) if when else None
    return updates, rows


def unlogged(reader: followed.Reader) -> set[str]:
    """The columns the reader reads that no trigger of its kind logs, less
    those it follows otherwise."""
    read, _ = captured(named(reader.read))
    otherwise = set(named(reader.otherwise)) if reader.otherwise else set()
    updates, rows = logged(reader.kind)
    out = set()
    for entry in read - otherwise:
        table, column = entry.split(".")
        columns = updates.get(table, set())
        if table not in rows or (columns is not None and column not in columns):
            out.add(entry)
    # Nothing on the list that the reader no longer reads.
    assert otherwise <= read, otherwise - read
    return out


def reader(kind: str) -> followed.Reader:
    return next(r for r in followed.READERS if r.kind == kind)


@pytest.mark.parametrize("kind", [r.kind for r in followed.READERS])
def test_every_column_a_kept_copy_reads_is_logged_or_said_why_not(kind: str) -> None:
    bulk_fleet.build(2, start=8)
    Engine.objects.create(name="llama.cpp", version="b1", default=True)
    assert not unlogged(reader(kind)), (
        "a copy placement keeps reads columns no trigger of its kind logs: add them to "
        "the triggers (a serving migration) or to the reader's list of those followed "
        "otherwise, with the reason"
    )


def test_a_node_is_read_with_its_listed_columns_alone() -> None:
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


def test_the_check_fails_on_a_column_no_trigger_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test above can fail: a column read that nothing logs.
    bulk_fleet.build(1, start=8)
    monkeypatch.setattr(snapshot, "NODE_READS", (*snapshot.NODE_READS, "kernel"))
    assert unlogged(reader(followed.NODE)) == {"inventory_node.kernel"}


def test_the_check_fails_on_a_column_logged_for_another_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The engine catalog's copy starts to read a model's source (logged
    # by nothing) and a profile's declared watts (logged, but as a node
    # change, which the engine catalog does not follow).
    Engine.objects.create(name="llama.cpp", version="b1", default=True)
    read = desired.read_engines

    def more() -> list[Engine]:
        list(Model.objects.order_by().values_list("source", flat=True))
        list(Profile.objects.order_by().values_list("power_w", flat=True))
        return read()

    monkeypatch.setattr(desired, "read_engines", more)
    assert unlogged(reader(followed.ENGINE)) == {"catalog_model.source", "catalog_profile.power_w"}
