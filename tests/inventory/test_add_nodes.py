"""Adding many nodes at once (a simulated fleet's start): what add_node
stores for each, in a statement per table, and all or nothing."""

from __future__ import annotations

import pytest

from llmgw.inventory import services
from llmgw.inventory.models import AuditEvent, Node


def test_each_new_node_gets_a_token_it_joins_with(db, django_assert_max_num_queries):
    names = [f"sim-{i:02d}" for i in range(40)]
    with django_assert_max_num_queries(6):
        tokens = services.add_nodes(names, "simulator")
    assert sorted(tokens) == names
    credential = services.join("sim-07", tokens["sim-07"])
    assert services.authenticate(credential).name == "sim-07"
    with pytest.raises(services.InventoryError):
        services.join("sim-07", tokens["sim-07"])  # once only
    assert AuditEvent.objects.filter(action="node-add", actor="simulator").count() == 40


def test_a_known_name_goes_through_add_node(make_node, db):
    make_node("sim-01")  # joined already
    services.revoke_node("sim-01", "test")
    tokens = services.add_nodes(["sim-01", "sim-02"], "simulator")
    assert services.join("sim-01", tokens["sim-01"]).startswith("sim-01.")


@pytest.mark.parametrize("bad", ["-starts-with-a-dash", "sim-joined"])
def test_one_refusal_adds_none(make_node, db, bad):
    make_node("sim-joined")
    with pytest.raises(services.InventoryError, match=bad):
        services.add_nodes(["sim-a", bad, "sim-b"], "simulator")
    assert not Node.objects.filter(name__in=["sim-a", "sim-b"]).exists()


def test_a_name_the_node_api_takes_for_itself_is_refused(db):
    # /api/v1/nodes/summary is the fleet's summary: a node named so could
    # never be read at /api/v1/nodes/NAME.
    for add in (
        lambda: services.add_node("summary", "test"),
        lambda: services.add_nodes(["sim-a", "summary"], "simulator"),
    ):
        with pytest.raises(
            services.InventoryError, match="'summary' is refused: /api/v1/nodes/summary"
        ):
            add()
    assert not Node.objects.exists()
