"""llmgw.database.rows.values: a queryset's rows for every node or a few,
composed once, the same as the ORM returns them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import QuerySet

from llmgw.database import rows
from llmgw.inventory.models import Gpu, Node
from tests import bulk_fleet

pytestmark = pytest.mark.django_db


def nodes() -> QuerySet[Node]:
    # JSON columns among them: each is converted as the queryset converts it.
    return Node.objects.values_list("id", "name", "agent_labels", "engines", "last_heartbeat_at")


def cards() -> QuerySet[Gpu]:
    return Gpu.objects.order_by("node_id", "index").values_list("node_id", "index", "uuid")


def test_every_row_some_or_none_as_the_orm_returns_them() -> None:
    bulk_fleet.build(6, start=8)
    pks = list(Node.objects.order_by("pk").values_list("pk", flat=True))
    assert rows.values("test nodes", nodes, "id", None) == list(nodes())
    some = {pks[1], pks[4]}
    assert rows.values("test nodes", nodes, "id", some) == list(nodes().filter(id__in=some))
    assert rows.values("test cards", cards, "node_id", some) == list(
        cards().filter(node_id__in=some)
    )
    assert rows.values("test cards", cards, "node_id", set()) == []
    # A label is a dict, as the ORM reads it, not the JSON text.
    assert isinstance(rows.values("test nodes", nodes, "id", {pks[0]})[0][2], dict)


def test_one_statement_serves_every_set_of_keys() -> None:
    # The ORM writes IN (%s, %s, ...): a statement for each count of keys,
    # each composed and planned anew. One, kept prepared on the connection.
    bulk_fleet.build(4, start=8)
    pks = list(Node.objects.order_by("pk").values_list("pk", flat=True))
    for n in (1, 2, 3, 4):
        got = rows.values("test cards", cards, "node_id", pks[:n])
        assert got == list(cards().filter(node_id__in=pks[:n]))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            ['%"inventory_gpu"."uuid"%'],
        )
        [(statement,)] = cursor.fetchall()
    assert "= ANY($1::bigint[])" in statement
