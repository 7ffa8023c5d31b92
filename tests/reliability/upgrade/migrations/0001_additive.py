"""Additive only, as an upgrade's migrations must be while the old code
runs: a table of its own, and a nullable column with an index on
inventory_node, the table every heartbeat updates (ALTER TABLE waits for
the heartbeats' row locks and holds theirs up while it runs)."""

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("inventory", "0013_hearing")]

    operations = [
        migrations.CreateModel(
            name="Release",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=64)),
            ],
        ),
        migrations.RunSQL(
            "ALTER TABLE inventory_node ADD COLUMN upgrade_note text NULL",
            "ALTER TABLE inventory_node DROP COLUMN upgrade_note",
        ),
        migrations.RunSQL(
            "CREATE INDEX upgrade_node_note ON inventory_node (upgrade_note)",
            "DROP INDEX upgrade_node_note",
        ),
    ]
