from django.db import migrations, models


def copy_summaries(apps, schema_editor):
    # Read once here, so no page or scrape has to read a whole map again.
    FabricMap = apps.get_model("fabrics", "FabricMap")
    for fabric_map in FabricMap.objects.filter(analysis__isnull=False).iterator(chunk_size=100):
        fabric_map.summary = (fabric_map.analysis or {}).get("summary")
        fabric_map.save(update_fields=["summary"])


class Migration(migrations.Migration):
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
