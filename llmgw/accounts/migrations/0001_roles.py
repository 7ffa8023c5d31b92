"""The four role groups (llmgw/accounts/roles.py), made here so that every
install, the demo's bootstrap admin included, has them before any user is
granted one. No user is granted a role by this migration: an account that
was only "logged in" before gets nothing until someone grants it a role
(`python manage.py grant_role USER ROLE`)."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

ROLES = ("viewer", "operator", "admin", "prometheus")


def create(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Group = apps.get_model("auth", "Group")
    for name in ROLES:
        Group.objects.get_or_create(name=name)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("auth", "0012_alter_user_first_name_max_length")]

    # Going back leaves the groups: deleting them would drop every grant.
    operations = [migrations.RunPython(create, migrations.RunPython.noop)]
