"""A key's limits (requests and tokens per minute, requests at once; null is
none) and its usage per model, which the gateway adds to in batches."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("catalog", "0004_model_file_counts"),
        ("serving", "0011_change_kinds_indexed"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="KeyUsage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("model", models.CharField(max_length=255)),
                ("requests", models.PositiveBigIntegerField(default=0)),
                ("prompt_tokens", models.PositiveBigIntegerField(default=0)),
                ("completion_tokens", models.PositiveBigIntegerField(default=0)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "ordering": ["api_key", "model"],
            },
        ),
        migrations.AddField(
            model_name="apikey",
            name="max_concurrent_requests",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apikey",
            name="requests_per_minute",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apikey",
            name="tokens_per_minute",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("requests_per_minute__isnull", True),
                    ("requests_per_minute__gte", 1),
                    _connector="OR",
                ),
                name="apikey_requests_per_minute_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("tokens_per_minute__isnull", True),
                    ("tokens_per_minute__gte", 1),
                    _connector="OR",
                ),
                name="apikey_tokens_per_minute_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("max_concurrent_requests__isnull", True),
                    ("max_concurrent_requests__gte", 1),
                    _connector="OR",
                ),
                name="apikey_max_concurrent_requests_positive",
            ),
        ),
        migrations.AddField(
            model_name="keyusage",
            name="api_key",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="usage",
                to="serving.apikey",
            ),
        ),
        migrations.AddConstraint(
            model_name="keyusage",
            constraint=models.UniqueConstraint(
                fields=("api_key", "model"), name="one_usage_row_per_key_model"
            ),
        ),
    ]
