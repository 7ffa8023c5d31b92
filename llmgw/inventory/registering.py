"""A registration's node row, written in one statement.

What the agent says the node is goes onto its row in one UPDATE, which
takes the row's lock for the rest of the registration (its GPU rows, the
apps' hooks) and reads back what the answer needs. For a node registering
with its credential the same statement authenticates it, as the heartbeat's
does (heartbeat_batch): the row is written only where the node's name, its
credential's digest and "not revoked" all match. The registration used to
read the whole row to authenticate, read it again locked, and write it
through the ORM: three statements and two rows of some seventy columns
decoded, for every node of a fleet joining at once.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection
from django.utils import timezone

from llmgw.inventory.models import REGISTERED_FIELDS, SYSTEM_TEXT_FIELDS, Gpu, Node


def values(data: dict[str, Any], address: str | None) -> dict[str, Any]:
    """The Node columns a registration sets, and to what. Cordons and
    operator labels are the operator's and are never among them; a
    registered field the agent left out keeps its value."""
    system = data.get("system") or {}
    row: dict[str, Any] = {field: data[field] for field in REGISTERED_FIELDS if field in data}
    row.update({field: system.get(field) or "" for field in SYSTEM_TEXT_FIELDS})
    row.update(
        address=address,
        cpus=system.get("cpus"),
        memory_total_bytes=system.get("memory_total_bytes"),
        cpu_flags=list(system.get("cpu_flags") or []),
        features=list(data.get("features") or []),
        agent_labels=dict(data.get("labels") or {}),
        fabrics=list(data.get("fabrics") or []),
        registered_at=timezone.now(),
        gpu_topology=data.get("gpu_topology"),
    )
    if "imex" in data:
        row["imex"] = data["imex"]
    return row


# Read back with the row: what the answer and the rest of the registration need.
_RETURNED = ("id", "name", "state", "last_heartbeat_at", "heartbeat_interval_s")


@functools.cache
def _statement(columns: tuple[str, ...], where: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    opts = Node._meta
    sets = ", ".join(f"{quote(opts.get_field(name).column)} = %s" for name in columns)
    match = " AND ".join(f"n.{quote(name)} = %s" for name in where)
    if "credential_hash" in where:
        match += f" AND n.{quote('revoked_at')} IS NULL"
    returned = ", ".join(f"n.{quote(name)}" for name in _RETURNED if name not in columns)
    gpu = Gpu._meta
    return (
        f"UPDATE {quote(opts.db_table)} AS n SET {sets} WHERE {match} "
        f"RETURNING {returned}, EXISTS (SELECT 1 FROM {quote(gpu.db_table)} AS g "
        f"WHERE g.{quote(gpu.get_field('node').column)} = n.{quote('id')})"
    )


def store(row: dict[str, Any], **where: Any) -> tuple[Node, bool] | None:
    """Write `row` (values()) onto the node `where` names (by id, or by name
    and credential digest), locking it; the node as stored (the columns
    written and those read back; any other is read when first used), and
    whether it has GPU rows. None when no node matched: nothing written."""
    opts = Node._meta
    columns = tuple(row)
    params = [opts.get_field(name).get_db_prep_save(row[name], connection) for name in columns]
    params += where.values()
    with connection.cursor() as cursor:
        cursor.execute(_statement(columns, tuple(where)), params)
        found = cursor.fetchone()
    if found is None:
        return None
    *returned, has_cards = found
    loaded = {**row, **dict(zip((n for n in _RETURNED if n not in columns), returned, strict=True))}
    fields = [f.attname for f in opts.concrete_fields if f.attname in loaded]
    node = Node.from_db(connection.alias, fields, [loaded[name] for name in fields])
    return node, bool(has_cards)
