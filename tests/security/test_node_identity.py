"""Node identities: names an agent can use, and joins refused on the record."""

from __future__ import annotations

import pytest

from llmgw.cli.server import node_command
from llmgw.inventory import services
from llmgw.inventory.models import AuditEvent, Node

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["", "a/b", "-lead", "a b", "x" * 254])
def test_node_add_refuses_a_name_no_agent_can_use(name, capsys, client, operator):
    # What `llmgw node add NAME` runs (main() would set Django up again).
    assert node_command("add", name) == 1
    err = capsys.readouterr().err
    assert f"node name {name!r} is refused" in err and "letters, digits" in err, err
    assert not Node.objects.exists()
    assert not AuditEvent.objects.exists()
    # The console links every node by its name; none it cannot link to exists.
    client.force_login(operator)
    assert client.get("/").status_code == 200


def test_node_add_accepts_the_names_agents_report():
    for name in ("gpu-a-01", "node7.rack2", "a_b", "x" * 253):
        assert services.add_node(name, "test")
    assert Node.objects.count() == 4


def test_a_refused_join_leaves_an_audit_row(client):
    services.add_node("gpu-1", "test")
    with pytest.raises(services.InventoryError):
        services.join("gpu-1", "not-the-token")
    answer = client.post(
        "/api/agent/v1/join",
        {"schema": 1, "node": "gpu-2", "token": "guessed"},
        content_type="application/json",
    )
    assert answer.status_code == 403
    refused = AuditEvent.objects.filter(action="join-refused").order_by("pk")
    assert [(e.node_name, e.actor) for e in refused] == [("gpu-1", "agent"), ("gpu-2", "agent")]
    node = Node.objects.get(name="gpu-1")
    assert node.credential_hash == "" and node.join_token_hash  # the token still stands
