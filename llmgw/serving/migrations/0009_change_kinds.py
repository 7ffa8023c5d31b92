"""One change log for every copy placement keeps between transactions.

The engine catalog that placement writes into each node's desired state
was kept per process and versioned by its rows' xmin and ctid, a rule of
its own beside the node change log. Its changes now write rows to the
same log, told apart by a kind: 'node' for what the warm fleet follows
(every row before this one), 'engine' for the catalog of engines. A
reader skips the kinds it does not keep: an engine changed never has
every process read its 5,000 nodes again.

Every change of an engine row counts (every column of it is read), one
row a statement: an apply of the catalog rewrites its engines together.
"""

from django.db import migrations

INSTALL = """
ALTER TABLE serving_nodechange ADD COLUMN kind text NOT NULL DEFAULT 'node';

CREATE FUNCTION serving_note_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO serving_nodechange (node_id, kind) VALUES (NULL, TG_ARGV[0]);
    RETURN NULL;
END $$;

CREATE TRIGGER catalog_engine_placement_change_rows
AFTER INSERT OR DELETE ON catalog_engine
FOR EACH STATEMENT EXECUTE FUNCTION serving_note_change('engine');
CREATE TRIGGER catalog_engine_placement_change_update
AFTER UPDATE ON catalog_engine
FOR EACH STATEMENT EXECUTE FUNCTION serving_note_change('engine');
CREATE TRIGGER catalog_engine_placement_change_truncate
AFTER TRUNCATE ON catalog_engine
FOR EACH STATEMENT EXECUTE FUNCTION serving_note_change('engine');
"""

REMOVE = """
DROP TRIGGER IF EXISTS catalog_engine_placement_change_rows ON catalog_engine;
DROP TRIGGER IF EXISTS catalog_engine_placement_change_update ON catalog_engine;
DROP TRIGGER IF EXISTS catalog_engine_placement_change_truncate ON catalog_engine;
DROP FUNCTION IF EXISTS serving_note_change();
DELETE FROM serving_nodechange WHERE kind <> 'node';
ALTER TABLE serving_nodechange DROP COLUMN kind;
"""


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("serving", "0008_fabric_sightings_not_logged"),
        ("catalog", "0004_model_file_counts"),
    ]

    operations = [migrations.RunSQL(INSTALL, REMOVE)]
