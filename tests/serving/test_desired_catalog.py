"""Each process keeps the engine catalog it writes into nodes' desired
state (llmgw.serving.desired.CATALOG) and reads it again only when a row
changed, came or went: in this transaction, or committed by another
process."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection, transaction

from llmgw.catalog.models import Engine
from llmgw.inventory.models import Node
from llmgw.serving import desired

pytestmark = pytest.mark.django_db(transaction=True)


def builds(node: Node) -> dict[str, dict]:
    node.refresh_from_db()
    return {f"{e['name']} {e['version']}": e["builds"] for e in node.desired["engines"]}


def test_an_engine_changed_in_this_transaction_is_read_again(make_node):
    node, _ = make_node("cpu-1")
    engine = Engine.objects.create(name="llama.cpp", version="b1", default=True)
    desired.rebuild([node.pk])
    assert builds(node) == {"llama.cpp b1": {}}
    # Twice in one transaction: the row's version moves with each update.
    with transaction.atomic():
        for url in ("https://a.example/1.zip", "https://a.example/2.zip"):
            engine.builds = {"ubuntu-x64": {"url": url, "sha256": "0" * 64}}
            engine.save()
            desired.rebuild([node.pk])
            assert builds(node)["llama.cpp b1"]["ubuntu-x64"]["url"] == url
        Engine.objects.create(name="llama.cpp", version="b2", default=True)
        desired.rebuild([node.pk])
        assert set(builds(node)) == {"llama.cpp b1", "llama.cpp b2"}
    engine.delete()
    desired.rebuild([node.pk])
    assert set(builds(node)) == {"llama.cpp b2"}


def test_an_engine_another_process_changed_is_read_again(make_node):
    node, _ = make_node("cpu-1")
    Engine.objects.create(name="llama.cpp", version="b1", default=True)
    desired.rebuild([node.pk])
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        autocommit=True,
    ) as other:
        other.execute(
            "UPDATE catalog_engine SET builds = %s::jsonb WHERE version = 'b1'",
            ['{"ubuntu-x64": {"url": "https://b.example/x.zip", "sha256": "1"}}'],
        )
    desired.rebuild([node.pk])
    assert builds(node)["llama.cpp b1"]["ubuntu-x64"]["url"] == "https://b.example/x.zip"


def test_an_unchanged_catalog_is_not_read_again(make_node, django_assert_num_queries):
    node, _ = make_node("cpu-1")
    Engine.objects.create(name="llama.cpp", version="b1", default=True)
    # The node's shards with the catalog's versions, its rows, the UPDATE.
    with django_assert_num_queries(3):
        desired.rebuild([node.pk])
    with django_assert_num_queries(2):
        desired.rebuild([node.pk])
    assert node.desired_digest != Node.objects.get(pk=node.pk).desired_digest
    node.refresh_from_db()
    assert node.desired_digest == desired.digest(node.desired)
