"""One poll for all of a web process's command streams (commands.due):
one query however many streams, its ids one array, and the same answers
each stream's own check gave: a revoked or rejoined node's stream is gone,
a node with a command pending is due."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from llmgw.inventory import commands, services
from llmgw.inventory.models import Node


def test_one_poll_checks_every_stream_in_one_query(make_node):
    nodes = {name: make_node(name)[0] for name in ("a", "b", "c", "d")}
    held = {name: node.credential_hash for name, node in nodes.items()}
    services.revoke_node("b", "test")
    services.revoke_node("c", "test")  # and joined again: a new credential
    services.join("c", services.add_node("c", "test"))
    commands.send(nodes["d"], "ping")
    streams = {(nodes[name].pk, held[name]) for name in nodes}
    streams.add((nodes["a"].pk, ""))  # nothing held is never a credential
    with CaptureQueriesContext(connection) as queries:
        gone, pending = commands.due(streams)
    (query,) = queries.captured_queries
    # An array, not an IN list of one parameter per stream.
    assert " IN (" not in query["sql"]
    assert gone == {(nodes["b"].pk, held["b"]), (nodes["c"].pk, held["c"]), (nodes["a"].pk, "")}
    assert pending == {nodes["d"].pk}
    for node_id, digest in streams:
        assert ((node_id, digest) in gone) == (not commands.holds(node_id, digest))
    assert Node.objects.count() == 4


def test_a_stream_opens_in_one_statement_that_says_what_waits(make_node):
    """A stream's opening: its node's key and digest, and whether a command
    waits (then it claims at once; else the wake-up or the poll brings it)."""
    node, credential = make_node("a")
    with CaptureQueriesContext(connection) as queries:
        assert services.authenticate_stream(credential) == (node.pk, node.credential_hash, False)
    assert len(queries.captured_queries) == 1
    commands.send(node, "ping")
    assert services.authenticate_stream(credential) == (node.pk, node.credential_hash, True)
    assert services.authenticate_stream(credential + "x") is None
    services.revoke_node("a", "test")
    assert services.authenticate_stream(credential) is None
