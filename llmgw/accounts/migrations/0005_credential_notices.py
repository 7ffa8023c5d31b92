"""A notice on every change to API tokens, users and their groups, heard
by each web process's credential listener (llmgw.accounts.token_events),
which drops its copy of them.

PostgreSQL sends a notice on commit, to every connection listening, for
every writer: the admin, a queryset's update() that sends no signal, raw
SQL. One notice a statement: a listener drops its whole copy, so which
rows changed does not matter; notices alike within one transaction are
sent once.
"""

from django.db import migrations

CHANNEL = "llmgw_credentials"
# auth_group: a role is a group's name, and a renamed group is a role lost.
TABLES = ["accounts_apitoken", "auth_user", "auth_user_groups", "auth_group"]

INSTALL = f"""
CREATE FUNCTION accounts_credentials_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END $$;
""" + "".join(
    f"CREATE TRIGGER {table}_credentials_changed "
    f"AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
    f"FOR EACH STATEMENT EXECUTE FUNCTION accounts_credentials_changed();\n"
    for table in TABLES
)

REMOVE = (
    "".join(f"DROP TRIGGER IF EXISTS {table}_credentials_changed ON {table};\n" for table in TABLES)
    + "DROP FUNCTION IF EXISTS accounts_credentials_changed();\n"
)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("accounts", "0004_node_certificate"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunSQL(INSTALL, REMOVE)]
