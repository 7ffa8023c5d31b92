from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def copy_summaries(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # Read once here, so no page or scrape has to read a whole map again.
    FabricMap = apps.get_model("fabrics", "FabricMap")
    for fabric_map in FabricMap.objects.filter(analysis__isnull=False).iterator(chunk_size=100):
        fabric_map.summary = (fabric_map.analysis or {}).get("summary")
        fabric_map.save(update_fields=["summary"])


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("fabrics", "0002_managerobservation"),
    ]

    operations = [
        migrations.AddField(
            model_name="fabricmap",
            name="summary",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(copy_summaries, migrations.RunPython.noop),
    ]
