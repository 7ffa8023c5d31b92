from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from llmgw.inventory.gpu_health import CARD_STATE, card_state


def work_out_card_state(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The same function the heartbeat runs, so a card stored before the
    # columns existed reads exactly as one stored after.
    Gpu = apps.get_model("inventory", "Gpu")
    changed = []
    for gpu in Gpu.objects.all().iterator(chunk_size=2000):
        state = card_state(gpu)
        if any(getattr(gpu, key) != value for key, value in state.items()):
            for key, value in state.items():
                setattr(gpu, key, value)
            changed.append(gpu)
    Gpu.objects.bulk_update(changed, CARD_STATE, batch_size=1000)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("inventory", "0010_staleness_pass"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpu",
            name="unhealthy_reason",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="gpu",
            name="nvlink_domain",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="gpu",
            name="nvlink_problem",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="gpu",
            name="nvlink_degraded",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(work_out_card_state, migrations.RunPython.noop),
    ]
