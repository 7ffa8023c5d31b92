"""DRF's authtoken kept every API token in clear (authtoken_token.key).
Each becomes an ApiToken holding only the key's SHA-256, so the CLI
configurations already written keep working, and the plaintext table is
dropped with its migration records. A converted token expires like a new
one, LLMGW_API_TOKEN_TTL_DAYS from now. There is no way back: the clear
keys are gone."""

import hashlib
from datetime import timedelta

from django.apps.registry import Apps
from django.conf import settings
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.utils import timezone


def convert(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    if "authtoken_token" not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("accounts", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute('SELECT "key", "user_id" FROM "authtoken_token"')
        rows = cursor.fetchall()
    expires = timezone.now() + timedelta(days=settings.API_TOKEN_TTL_DAYS)
    ApiToken.objects.bulk_create(
        ApiToken(
            user_id=user_id,
            name="converted from DRF authtoken",
            prefix=key[:8],
            digest=hashlib.sha256(key.encode()).hexdigest(),
            expires_at=expires,
        )
        for key, user_id in rows
    )
    schema_editor.execute('DROP TABLE "authtoken_token"')
    schema_editor.execute("DELETE FROM django_migrations WHERE app = 'authtoken'")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("accounts", "0002_apitoken")]

    operations = [migrations.RunPython(convert, migrations.RunPython.noop)]
