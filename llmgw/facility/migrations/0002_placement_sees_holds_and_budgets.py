"""Tell each process's warm copy of the fleet (llmgw.serving.warm) that a
hold or a budget changed, so the next placement reads the fleet again.

The warm copy follows a log of node changes that PostgreSQL triggers
write (serving_nodechange; a NULL node means the whole fleet). A hold
placed by an operator must stop placement at once in every worker, and a
hold's drain progress, rewritten every reconciler tick, must not make
every worker read the fleet again: so only inserts, deletes and changes
of what placement reads (domain, reason, drain; domain, watts) are noted.
The function checks that the log exists, so this migration does not
depend on serving's.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

FUNCTION = """
CREATE OR REPLACE FUNCTION facility_note_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('serving_nodechange') IS NOT NULL THEN
        EXECUTE 'INSERT INTO serving_nodechange (node_id) VALUES (NULL)';
    END IF;
    RETURN NULL;
END $$;
"""
TABLES = {"facility_hold": ("domain", "reason", "drain"), "facility_budget": ("domain", "watts")}


def install(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema_editor.execute(FUNCTION)
    for table, columns in TABLES.items():
        old = ", ".join(f"OLD.{c}" for c in columns)
        new = ", ".join(f"NEW.{c}" for c in columns)
        schema_editor.execute(
            f"CREATE TRIGGER {table}_rows AFTER INSERT OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION facility_note_change()"
        )
        schema_editor.execute(
            f"CREATE TRIGGER {table}_update AFTER UPDATE ON {table} FOR EACH ROW "
            f"WHEN (({old}) IS DISTINCT FROM ({new})) EXECUTE FUNCTION facility_note_change()"
        )


def remove(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_rows ON {table}")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_update ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS facility_note_change()")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("facility", "0001_holds_and_budgets")]
    operations = [migrations.RunPython(install, remove)]
