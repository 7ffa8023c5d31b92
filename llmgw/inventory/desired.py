"""Stores what each node should run, as serving decided it.

The document is serving's (llmgw.serving.desired builds it from shards
and the engine catalog); the row is inventory's, so inventory writes it
(docs/data-ownership.md), and the heartbeat answers with it when the
node's digest differs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import transaction

from llmgw.database import prepared

# Each node's document by its NVIDIA driver; the document without one is
# sent only where it differs.
WRITE = """
UPDATE inventory_node AS n
SET desired = CASE WHEN n.nvidia_driver <> '' THEN v.gpu ELSE COALESCE(v.bare, v.gpu) END,
    desired_digest = CASE WHEN n.nvidia_driver <> '' THEN v.gpu_digest
                          ELSE COALESCE(v.bare_digest, v.gpu_digest) END
FROM (VALUES {rows}) AS v(id, gpu, gpu_digest, bare, bare_digest)
WHERE n.id = v.id
"""
# Locks are taken after the sort (PostgreSQL applies FOR UPDATE to the
# sorted rows), so in name order.
LOCK = "SELECT 1 FROM inventory_node WHERE id = ANY(%s) ORDER BY name FOR UPDATE"
WRITE_ROW = "(%s::bigint, %s::jsonb, %s::text, %s::jsonb, %s::text)"
# Five parameters a node, well under PostgreSQL's 65,535 a statement.
WRITE_CHUNK = 2_000


def digest(desired: dict[str, Any]) -> str:
    """What a heartbeat sends back to say which desired state its node holds."""
    return digest_of(json.dumps(desired, sort_keys=True))


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def store(docs: dict[int, tuple[str, str | None]]) -> None:
    """Each node's document (by pk) as JSON text, with an NVIDIA driver
    and without (None: the same)."""
    items = list(docs.items())
    if not items:
        return
    if len(items) == 1:
        # One row's UPDATE cannot hold locks crosswise: placement's usual
        # one-node rebuild takes no extra trip.
        with prepared.cursor() as cursor:
            _update(cursor, items)
        return
    # One transaction (none of its own inside a caller's): the locks taken
    # in name order must be held through the UPDATEs.
    with transaction.atomic(savepoint=False), prepared.cursor() as cursor:
        # Heartbeat batches lock their nodes' rows in name order; an UPDATE
        # ... FROM VALUES locks in whatever order its plan reads them, and
        # the two deadlocked at 5,000 nodes, failing a batch of live nodes'
        # heartbeats. Taken first, in the batches' order, the rows are
        # waited for, never held crosswise.
        cursor.execute(LOCK, [[pk for pk, _ in items]])
        for start in range(0, len(items), WRITE_CHUNK):
            _update(cursor, items[start : start + WRITE_CHUNK])


def _update(cursor: Any, chunk: list[tuple[int, tuple[str, str | None]]]) -> None:
    params: list[Any] = []
    for pk, (gpu, bare) in chunk:
        params += [pk, gpu, digest_of(gpu), bare, None if bare is None else digest_of(bare)]
    cursor.execute(WRITE.format(rows=", ".join([WRITE_ROW] * len(chunk))), params)
