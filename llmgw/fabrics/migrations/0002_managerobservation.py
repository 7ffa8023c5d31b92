import django.db.models.deletion
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def forget_manager_digests(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The fabric's view is worked out from every node's observations, and
    # there are none yet: a node whose listing has not changed would never
    # send one. Forgetting the digest stores each node's next listing in full.
    apps.get_model("inventory", "Node").objects.update(managers_digest="")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("fabrics", "0001_initial"),
        ("inventory", "0006_port_digests"),
    ]

    operations = [
        migrations.CreateModel(
            name="ManagerObservation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("guid", models.CharField(db_index=True, max_length=18)),
                ("lid", models.IntegerField(blank=True, null=True)),
                ("priority", models.IntegerField(blank=True, null=True)),
                ("state", models.CharField(blank=True, default="", max_length=16)),
                ("master", models.BooleanField(default=False)),
                ("seen_at", models.DateTimeField()),
                (
                    "fabric",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="observations",
                        to="fabrics.physicalfabric",
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="manager_observations",
                        to="inventory.node",
                    ),
                ),
            ],
            options={
                "ordering": ["fabric", "guid", "node"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("node", "guid"), name="one_observation_per_manager"
                    )
                ],
            },
        ),
        migrations.RunPython(forget_manager_digests, migrations.RunPython.noop),
    ]
