from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def register_again(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # A node registered before this column has no address, and none of its
    # shards' URLs can be checked against one. A heartbeat answers "register"
    # while registered_at is null, so each agent registers once more, from
    # where it is, and its routes come back.
    apps.get_model("inventory", "Node").objects.filter(address=None).update(registered_at=None)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("inventory", "0008_node_wear_reported_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="address",
            field=models.GenericIPAddressField(blank=True, null=True),
        ),
        migrations.RunPython(register_again, migrations.RunPython.noop),
    ]
