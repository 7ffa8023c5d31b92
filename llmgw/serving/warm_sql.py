"""The statements the warm fleet (warm.py) runs on the log of node
changes that PostgreSQL's triggers write (migrations/0006_node_changes.py):
its rows of kind 'node' (followed.py)."""

from typing import Any

from django.db import connection

from llmgw.database import prepared
from llmgw.serving.followed import unseen

# The rows whose transactions had not committed when we last looked (at
# or above that snapshot's xmax, or in progress then), and this
# transaction's own: its rows read the same before and after it writes.
# A look made to write (placing) assigns this transaction its id, so the
# log rows it goes on to write are known by it without reading them back.
CHANGES = f"""
SELECT pg_current_snapshot()::text,
       (CASE WHEN %s THEN pg_current_xact_id() ELSE pg_current_xact_id_if_assigned() END)::text,
       c.id, c.node_id, c.xid::text
FROM (SELECT 1) AS one
LEFT JOIN serving_nodechange c
  ON c.kind = 'node'
 AND ({unseen("%s", "%s", "c.xid")} OR c.xid = pg_current_xact_id_if_assigned())
"""


# A cold look: the snapshot, and the nodes this transaction changed itself
# (a NULL: the whole fleet), which a whole read from inside it sees as no
# other transaction does.
START = """
SELECT pg_current_snapshot()::text, {assign}::text,
       ARRAY(SELECT node_id FROM serving_nodechange
             WHERE kind = 'node' AND xid = pg_current_xact_id_if_assigned())
"""


WHOLE_SINCE = f"""
SELECT EXISTS (
    SELECT 1 FROM serving_nodechange
    WHERE node_id IS NULL AND kind = 'node' AND {unseen("%s", "%s")}
)
"""


DEADLINES = """
SELECT id, state, last_heartbeat_at, heartbeat_interval_s FROM inventory_node WHERE id = ANY(%s)
"""


def beats(pks: list[int]) -> list[tuple[Any, ...]]:
    """(pk, state, last heartbeat, interval) of these nodes. One array
    rather than thousands of IN parameters, which the driver spends most
    of a second splitting into the query; prepared once, as every look
    reads again the nodes the other processes placed on."""
    with prepared.cursor() as cursor:
        cursor.execute(DEADLINES, [pks])
        return list(cursor.fetchall())


# Rows older than the mark set at least KEEP_S (warm.py) ago.
PRUNE = """
WITH mark AS (
    SELECT xmin_mark FROM serving_nodechange_mark
    WHERE id = 1 AND marked_at < now() - make_interval(secs => %s)
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM serving_nodechange WHERE xid < (SELECT xmin_mark FROM mark)
)
UPDATE serving_nodechange_mark
SET xmin_mark = pg_snapshot_xmin(pg_current_snapshot()), marked_at = now()
WHERE id = 1 AND EXISTS (SELECT 1 FROM mark)
"""


def whole_change_since(snapshot: str) -> bool:
    """Whether a change of the whole fleet was logged by a transaction
    that had not committed at `snapshot`."""
    _, xmax, xip = snapshot.split(":")
    with connection.cursor() as cursor:
        cursor.execute(WHOLE_SINCE, [xmax, xip.split(",") if xip else []])
        return bool(cursor.fetchone()[0])
