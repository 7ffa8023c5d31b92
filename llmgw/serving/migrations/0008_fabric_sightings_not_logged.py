"""A fabric being seen, swept to the same map, or failing to be swept no
longer counts as a change of the whole fleet.

0006 logged every update of a physical fabric and of its map as a change
to every node (a NULL node). Each node that reports its ports sets its
fabric's last_seen, so a fleet reconnecting after a restart wrote some
3,000 such rows in a minute, and every process's warm fleet read all
5,000 nodes again for each one it saw: 6 to 8 s a read under load, while
placements and heartbeats waited. A sweep whose command timed out writes
the map's error columns, and did the same; and every five-minute sweep
stores the map again with a new taken_at, the analysis unchanged, so
every process read the whole fleet every five minutes in steady state.
Placement reads a fabric's identity and kind (through its ports) and a
map's analysis (taken_at only to know when to index it again, which it
reads itself); only those columns count now. A fabric or map created or
deleted still changes the whole fleet.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# (table, the columns placement reads; None: every update, as 0006 had it)
TABLES = {
    "fabrics_physicalfabric": ["identity", "kind"],
    "fabrics_fabricmap": ["fabric_id", "analysis"],
}


def _create(table: str, columns: list[str] | None) -> str:
    trigger = f"{table}_placement_change_update"
    when = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns) if columns else ""
    return (
        f"DROP TRIGGER IF EXISTS {trigger} ON {table};"
        f"CREATE TRIGGER {trigger} AFTER UPDATE ON {table} FOR EACH ROW "
        f"{f'WHEN ({when}) ' if when else ''}EXECUTE FUNCTION serving_note_node_change('');"
    )


def install(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for table, columns in TABLES.items():
        schema_editor.execute(_create(table, columns))


def remove(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for table in TABLES:
        schema_editor.execute(_create(table, None))


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("serving", "0007_wear_times_not_logged")]

    operations = [migrations.RunPython(install, remove)]
