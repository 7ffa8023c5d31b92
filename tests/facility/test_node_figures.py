"""What PostgreSQL keeps on each node's row for the database's check of a
placement in a capped domain (facility migration 0003): the domains the
node is in, its derived and its measured power. Each is written twice,
once in Python for the warm index and the pages (domains.keys_of,
power.derived, power.measured) and once in SQL for the check; these
tests hold the two to each other on odd input as well as plain."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from llmgw.facility import domains, power
from llmgw.inventory.models import Node
from tests.facility.test_facility_tree import ODD_READINGS

pytestmark = pytest.mark.django_db


def stored(name: str) -> tuple[list[str], float | None, float | None]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT domain_keys, derived_w, measured_w FROM inventory_node WHERE name = %s",
            [name],
        )
        keys, derived, measured = cursor.fetchone()
    return keys, derived, measured


LABELS = [
    # (the agent's, the operator's)
    ({}, {}),
    ({"llmgw.io/rack": "r1", "llmgw.io/site": "s1", "other": "x"}, {}),
    ({"llmgw.io/rack": "r1"}, {"llmgw.io/rack": "r9", "llmgw.io/pdu": "p1"}),
    # An operator's empty value hides the agent's place, as Node.labels reads.
    ({"llmgw.io/room": "hall1", "llmgw.io/row": "w1"}, {"llmgw.io/room": ""}),
    (
        {
            "llmgw.io/site": "s",
            "llmgw.io/room": "m",
            "llmgw.io/row": "w",
            "llmgw.io/rack": "r",
            "llmgw.io/pdu": "p",
        },
        {},
    ),
    ({"llmgw.io/rack": "a=b c"}, {}),
]


@pytest.mark.parametrize(("agent", "operator"), LABELS)
def test_the_row_has_the_domains_keys_of_says(agent: Any, operator: Any) -> None:
    node = Node.objects.create(name="n-1", agent_labels=agent, operator_labels=operator)
    assert stored("n-1")[0] == domains.keys_of(node.name, node.labels)
    # And again once the labels change, whoever writes them.
    Node.objects.filter(pk=node.pk).update(operator_labels={"llmgw.io/rack": "moved"})
    node.refresh_from_db()
    assert stored("n-1")[0] == domains.keys_of(node.name, node.labels)


@pytest.mark.parametrize(("telemetry", "sensors"), ODD_READINGS)
def test_the_row_has_the_figures_power_reads(telemetry: Any, sensors: Any) -> None:
    Node.objects.create(name="n-1", gpu_telemetry=telemetry, sensors=sensors)
    listed = telemetry if isinstance(telemetry, list) else None
    mapping = sensors if isinstance(sensors, dict) else None
    assert stored("n-1")[1:] == (power.derived(listed), power.measured(listed, mapping))
