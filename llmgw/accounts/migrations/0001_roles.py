"""The four role groups (llmgw/accounts/roles.py), made here so that every
install, the demo's bootstrap admin included, has them before any user is
granted one. No user is granted a role by this migration: an account that
was only "logged in" before gets nothing until someone grants it a role
(`python manage.py grant_role USER ROLE`)."""

from django.db import migrations

ROLES = ("viewer", "operator", "admin", "prometheus")


def create(apps, schema_editor):  # type: ignore[no-untyped-def]
    Group = apps.get_model("auth", "Group")
    for name in ROLES:
        Group.objects.get_or_create(name=name)


class Migration(migrations.Migration):
    dependencies = [("auth", "0012_alter_user_first_name_max_length")]

    # Going back leaves the groups: deleting them would drop every grant.
    operations = [migrations.RunPython(create, migrations.RunPython.noop)]
