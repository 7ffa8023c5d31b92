"""A node's wear times no longer count as a change placement reads.

Every heartbeat that carries wear (about once a minute a GPU node) sets
wear_reported_at, and 0006 logged each such write as a changed node: at
5,000 nodes some 60 a second, each read again and re-indexed by every
process's warm fleet, so that a process which had not looked for half a
minute spent seconds catching up before it could place or explain. No
node view reads either column (cards' wear staleness is shown by the
console and /metrics, not weighed by placement; a card made unhealthy by
its wear changes inventory_gpu.unhealthy_reason, which is logged).
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# 0006's node columns less wear_reported_at and wear_changed_at.
NODE_COLUMNS = (
    "name state cordoned cordon_reason operator_labels agent_labels cpus "
    "memory_total_bytes engines engines_probed fabrics active_fabrics gpu_topology "
    "imex heartbeat_interval_s"
).split()
WEAR = ["wear_reported_at", "wear_changed_at"]
TRIGGER = "inventory_node_placement_change_update"


def _create(columns: list[str]) -> str:
    when = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)
    return (
        f"DROP TRIGGER IF EXISTS {TRIGGER} ON inventory_node;"
        f"CREATE TRIGGER {TRIGGER} AFTER UPDATE ON inventory_node FOR EACH ROW "
        f"WHEN ({when}) EXECUTE FUNCTION serving_note_node_change('id');"
    )


def install(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema_editor.execute(_create(NODE_COLUMNS))


def remove(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema_editor.execute(_create(NODE_COLUMNS + WEAR))


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("serving", "0006_node_changes")]

    operations = [migrations.RunPython(install, remove)]
