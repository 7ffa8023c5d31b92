from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("inventory", "0012_node_desired_digest"),
    ]

    operations = [
        migrations.RemoveField(model_name="stalenesspass", name="resumed_at"),
        migrations.CreateModel(
            name="Hearing",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("since", models.DateTimeField()),
                ("heard_at", models.DateTimeField()),
            ],
        ),
    ]
