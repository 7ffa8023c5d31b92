import hashlib
import json

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def digest_desired(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # As llmgw.serving.desired.digest writes it, so nodes' agents stop
    # getting their unchanged desired state from the first heartbeat on.
    Node = apps.get_model("inventory", "Node")
    for node in Node.objects.only("pk", "desired").iterator():
        text = json.dumps(node.desired or {}, sort_keys=True).encode()
        Node.objects.filter(pk=node.pk).update(desired_digest=hashlib.sha256(text).hexdigest())


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("inventory", "0011_gpu_card_state"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="desired_digest",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.RunPython(digest_desired, migrations.RunPython.noop),
    ]
