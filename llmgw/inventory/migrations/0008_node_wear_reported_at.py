from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def forget_wear_digests(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # Nodes whose wear has not changed since before these columns would keep
    # wear_changed_at null, and their cards' wear would go stale while still
    # reported. Forgetting the digest makes each node's next wear report be
    # stored in full once, which sets both columns right.
    apps.get_model("inventory", "Node").objects.update(gpu_health_digest="")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("inventory", "0007_node_desired_node_shard_samples_node_shards_digest"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="wear_reported_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="wear_previously_reported_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="wear_changed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(forget_wear_digests, migrations.RunPython.noop),
    ]
