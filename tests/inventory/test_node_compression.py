"""The node row's JSON columns are compressed with lz4 (inventory migration
0014): pglz spent 1.6-1.9 ms of PostgreSQL's CPU on each write of a GPU
node's desired state, then stored it uncompressed."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection, models

from llmgw.catalog.models import Engine
from llmgw.inventory.models import Node
from llmgw.serving import desired

pytestmark = pytest.mark.django_db


def _has_lz4() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
        return "lz4" in cursor.fetchone()[0]


def test_every_json_column_of_the_node_row_is_lz4():
    if not _has_lz4():
        pytest.skip("this PostgreSQL was built without lz4: the migration keeps pglz")
    json_columns = {f.column for f in Node._meta.concrete_fields if isinstance(f, models.JSONField)}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, attcompression FROM pg_attribute"
            " WHERE attrelid = 'inventory_node'::regclass AND attnum > 0 AND NOT attisdropped"
        )
        compression = dict(cursor.fetchall())
    assert json_columns and {c: compression[c] for c in json_columns} == dict.fromkeys(
        json_columns, "l"
    )


def test_a_desired_state_of_pinned_requirements_is_stored_compressed(make_node):
    """A catalog engine pinned as the shipped ones are: hundreds of lines,
    each with its sha256. pglz gave up on such a document after trying."""
    if not _has_lz4():
        pytest.skip("this PostgreSQL was built without lz4: the migration keeps pglz")
    lines = [
        f"package-{i}==1.{i}.0 --hash=sha256:{hashlib.sha256(str(i).encode()).hexdigest()}"
        for i in range(400)
    ]
    Engine.objects.create(name="vllm", version="0.1", default=True, package={"requirements": lines})
    node, _ = make_node("gpu-1")
    desired.rebuild([node.pk])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_compression(desired), pg_column_size(desired),"
            " octet_length(desired::text) FROM inventory_node WHERE id = %s",
            [node.pk],
        )
        method, stored, text = cursor.fetchone()
    assert text > 40_000  # as large as a GPU node's
    assert method == "lz4"
    assert stored < text * 0.75
