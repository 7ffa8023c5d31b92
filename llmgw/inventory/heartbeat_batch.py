"""Many nodes' heartbeats in one statement (PostgreSQL).

At 10,000 nodes every 10 s the control plane takes 1,000 heartbeats a
second, nearly all of which change nothing but measurements. Sent one
UPDATE each, PostgreSQL's cost is per statement (parse, plan, a
transaction, a commit) rather than per row, and so is the round trip.
Here a whole tick's heartbeats go in one statement: the rows travel as
one JSON array, each node's row is updated from its own element, each of
its filesystems' free space likewise, and the node rows come back
(RETURNING) with the stored digests that say whether a section changed.

Every element is authenticated by the statement itself: a row is updated
only where the node's name, its credential's digest and "not revoked"
all match, so a heartbeat can only ever write its own node's row, and an
element whose credential is wrong updates nothing and returns nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from django.db import connection
from django.db.models import JSONField

from llmgw.inventory.models import Filesystem, Node

# (column, the column it copies or None), as heartbeats.MEASURED names them.
Measured = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class Beat:
    name: str
    credential_hash: str
    # Column -> value, of heartbeats.MEASURED's columns (a copying one's is ignored).
    fields: dict[str, Any]
    # (mount, free bytes) of each filesystem it reported; None when it sent none.
    free: list[tuple[str, int]] | None
    at: datetime
    # The digest of the desired state the agent holds; None when it sent none.
    desired_digest: str | None = None


_encode = msgspec.json.Encoder().encode
_sql: dict[tuple[bool, tuple[str, ...], Measured], str] = {}


def _returned(name: str) -> str:
    quote = connection.ops.quote_name
    column = f"n.{quote(Node._meta.get_field(name).column)}"
    if name == "desired":
        # Null when the agent holds this desired state already: its tens of
        # kilobytes are then neither read (it is TOASTed) nor sent.
        return f"CASE WHEN b.d = n.{quote('desired_digest')} THEN NULL ELSE {column} END"
    return column


def _statement(asynchronous: bool, returned: tuple[str, ...], measured: Measured) -> str:
    quote = connection.ops.quote_name
    opts = Node._meta
    sets = []
    for name, copies in measured:
        field = opts.get_field(name)
        column = quote(field.column)
        if isinstance(field, JSONField):
            # JSON null is stored as SQL NULL, as the ORM stores None.
            value = f"NULLIF(b.f -> '{name}', 'null'::jsonb)"
        else:
            value = f"(b.f ->> '{name}')::{field.db_type(connection)}"
        if copies is not None:
            # As stored before this UPDATE: SET expressions read the old row.
            value = f"n.{quote(opts.get_field(copies).column)}"
        sets.append(f"{column} = CASE WHEN b.f ? '{name}' THEN {value} ELSE n.{column} END")
    fs = Filesystem._meta
    returning = ", ".join(_returned(name) for name in returned)
    # Committed without waiting for the WAL flush, for this statement's own
    # transaction only: measurements are replaced every 10 s, so a crash
    # losing the last few hundred ms of them is harmless, and waiting for
    # the disk was most of a heartbeat's time. set_config(..., true) lasts
    # until this transaction's commit, which is what reads it. Inside a
    # caller's transaction it is left out: it would make the caller's
    # commit asynchronous too.
    commit = (
        ", (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit"
        if asynchronous
        else ""
    )
    return f"""
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%s::jsonb) AS b(n text, h text, f jsonb, d text)
), node AS (
    UPDATE {quote(opts.db_table)} AS n SET {", ".join(sets)}
    FROM b{commit}
    WHERE n.{quote("name")} = b.n AND n.{quote("credential_hash")} = b.h
      AND n.{quote("revoked_at")} IS NULL
    RETURNING {returning}
), free AS (
    UPDATE {quote(fs.db_table)} AS fs
    SET {quote("free_bytes")} = x.free, {quote("reported_at")} = x.at
    FROM node, jsonb_to_recordset(%s::jsonb) AS x(n text, mount text, free bigint, at timestamptz)
    WHERE node.{quote("name")} = x.n AND fs.{quote("node_id")} = node.{quote("id")}
      AND fs.{quote("mount")} = x.mount
)
SELECT * FROM node"""


def update(
    beats: Sequence[Beat], returned: Sequence[str], measured: Measured
) -> dict[str, tuple[Any, ...]]:
    """One statement for all of `beats` (one per node name at most),
    setting each of `measured` a beat brings: each authenticated node's
    row as `returned` lists it, by name. `returned` must begin with
    "name"; its "desired" is None where the beat's desired_digest matches
    the stored one."""
    key = (not connection.in_atomic_block, tuple(returned), measured)
    sql = _sql.get(key)
    if sql is None:
        sql = _sql[key] = _statement(*key)
    # In name order, so two processes writing overlapping batches take the
    # rows' locks in the same order.
    ordered = sorted(beats, key=lambda beat: beat.name)
    rows = [
        {
            "n": beat.name,
            "h": beat.credential_hash,
            "f": beat.fields,
            "d": beat.desired_digest,
        }
        for beat in ordered
    ]
    free = [
        {"n": beat.name, "mount": mount, "free": size, "at": beat.at}
        for beat in ordered
        for mount, size in beat.free or ()
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, [_encode(rows).decode(), _encode(free).decode()])
        return {row[0]: row for row in cursor.fetchall()}
