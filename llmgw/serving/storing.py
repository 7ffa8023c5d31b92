"""A placement's rows in one statement on PostgreSQL: the replica, its
shards, their GPU claims and the model's placement record.

Written under placement's lock, where every round trip is every placer's
wait: four INSERTs and an UPDATE made one by one cost four extra trips
and the ORM's compiling of each. The columns and their values still come
from the models (each field's default and its conversion for the
database), so a field added to a model is written here too. The unique
(node, index) claim refuses a GPU handed out twice as before; a model's
first record, which has no row to update yet, is created after.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field
from django.db.models import Model as DjangoModel
from django.utils import timezone

from llmgw.database import prepared
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import PlacementRecord, Replica, Shard

STATEMENT = """
WITH r AS (
    INSERT INTO serving_replica ({replica_columns}) VALUES ({replica_values})
    RETURNING id
), s AS (
    INSERT INTO serving_shard (replica_id, {shard_columns}) VALUES {shard_rows}
    RETURNING id, node_id, rank
), c AS (
    INSERT INTO serving_gpuclaim (shard_id, node_id, index)
    SELECT s.id, s.node_id, wanted.index
    FROM s JOIN (VALUES {claim_rows}) AS wanted(rank, index) ON wanted.rank = s.rank
), p AS (
    UPDATE serving_placementrecord
    SET {record_set}, placed_replica = (SELECT id FROM r)
    WHERE model_id = %s
    RETURNING 1
){held}
SELECT (SELECT id FROM r), (SELECT count(*) FROM p){counts}
"""

# A placement by hand is held: the model's always_running rises to the
# replicas that run, this one counted (the statement's own inserts are not
# visible to its reads). The caller holds the model's row lock, so the
# value before is the one the update starts from.
HELD = """, held AS (
    UPDATE catalog_model
    SET always_running = live.n,
        under_load = CASE WHEN under_load > 0 AND under_load < live.n THEN live.n
                          ELSE under_load END,
        updated_at = %s
    FROM (
        SELECT count(*) + 1 AS n FROM serving_replica
        WHERE model_id = %s AND NOT (state = ANY(%s))
    ) AS live
    WHERE id = %s AND live.n > always_running
    RETURNING always_running
)"""
COUNTS = """,
       (SELECT always_running FROM catalog_model WHERE id = %s),
       (SELECT always_running FROM held)"""


def _fields(model: type[DjangoModel], leave: Sequence[str] = ()) -> list[Field[Any, Any]]:
    return [f for f in model._meta.concrete_fields if not f.primary_key and f.attname not in leave]


def _values(obj: DjangoModel, fields: list[Field[Any, Any]]) -> list[Any]:
    # pre_save fills auto_now fields on the object as an ORM save would.
    return [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]


def _columns(fields: list[Field[Any, Any]]) -> str:
    return ", ".join(connection.ops.quote_name(f.column) for f in fields)


@functools.cache
def _shape() -> tuple[list[Field[Any, Any]], list[Field[Any, Any]], list[Field[Any, Any]]]:
    """The replica's, shards' and record's columns written: the models'
    fields, which do not change while the process runs."""
    return (
        _fields(Replica),
        _fields(Shard, ("replica_id",)),
        _fields(PlacementRecord, ("model_id", "placed_replica")),
    )


@functools.cache
def _statement(shards: int, claims: int, hold: bool) -> str:
    """The statement for a placement of this shape, composed once: the
    composing was a tenth of a placement's CPU."""
    replica_fields, shard_fields, record_fields = _shape()
    shard_row = f"((SELECT id FROM r), {', '.join(['%s'] * len(shard_fields))})"
    return STATEMENT.format(
        held=HELD if hold else "",
        counts=COUNTS if hold else "",
        replica_columns=_columns(replica_fields),
        replica_values=", ".join(["%s"] * len(replica_fields)),
        shard_columns=_columns(shard_fields),
        shard_rows=", ".join([shard_row] * shards),
        # No claim (a CPU shard): a row that joins no shard.
        claim_rows=", ".join(["(%s::integer, %s::integer)"] * claims)
        or "(NULL::integer, NULL::integer)",
        record_set=", ".join(f"{connection.ops.quote_name(f.column)} = %s" for f in record_fields),
    )


def store(
    replica: Replica, shards: list[Shard], record: PlacementRecord, hold: bool = False
) -> tuple[int, int] | None:
    """Insert the replica, its shards (in rank order) and their claims
    (`shard.gpu_indices`), and point the model's record at the replica;
    sets the replica's key. Creates the record if the model had none.
    `hold`: raise always_running (HELD); returns it before and after."""
    replica_fields, shard_fields, record_fields = _shape()
    params: list[Any] = _values(replica, replica_fields)
    for shard in shards:
        params += _values(shard, shard_fields)
    claims = [(s.rank, i) for s in shards for i in s.gpu_indices]
    params += [v for claim in claims for v in claim]
    params += _values(record, record_fields)
    params.append(record.model_id)
    if hold:
        gone = [ReplicaState.FAILED.value, ReplicaState.LOST.value]
        params += [timezone.now(), replica.model_id, gone, replica.model_id, replica.model_id]
    sql = _statement(len(shards), len(claims), hold)
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)
        replica_id, updated, *counts = cursor.fetchone()
    replica.pk = replica_id
    replica._state.adding = False
    replica._state.db = connection.alias
    if not updated:
        record.placed_replica = replica_id
        record.save(force_insert=True)
    if not hold:
        return None
    before, raised = counts
    return before, before if raised is None else raised
