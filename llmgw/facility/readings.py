"""Every node's place and power figures in one query, for the facility
listing: the figures of llmgw.facility.power as PostgreSQL keeps them on
each node's row (facility migration 0003), not each node's readings
decoded into Python. At 5,000 nodes reading the rows as models took
1.7 s, most of it decoding 20,000 JSON documents; the same figures come
back in a tenth of that.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models.expressions import RawSQL

from llmgw.inventory.models import Node
from llmgw.locations import LEVELS, label

# Operators' labels win over the agent's (Node.labels).
LABELS = (
    'COALESCE("inventory_node"."agent_labels", \'{}\'::jsonb) || '
    'COALESCE("inventory_node"."operator_labels", \'{}\'::jsonb)'
)


@dataclass(frozen=True)
class NodeReading:
    pk: int
    name: str
    # Each level's value, in LEVELS order; "" where the node names none.
    place: tuple[str, ...]
    derived_w: float | None
    measured_w: float | None


def nodes() -> Iterator[NodeReading]:
    assert Node._meta.db_table == "inventory_node", "the SQL above names the table"
    places = {f"at_{level}": RawSQL(f"({LABELS}) ->> %s", (label(level),)) for level in LEVELS}
    rows = Node.objects.annotate(
        # Columns the model does not declare: only SQL reads them.
        derived_w=RawSQL('"inventory_node"."derived_w"', ()),
        measured_w=RawSQL('"inventory_node"."measured_w"', ()),
        **places,
    ).values_list("pk", "name", "derived_w", "measured_w", *places)
    for pk, name, derived, measured, *place in rows:
        yield NodeReading(pk, name, tuple(v or "" for v in place), derived, measured)
