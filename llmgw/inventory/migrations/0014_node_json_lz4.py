"""The node row's JSON columns compressed with lz4 rather than pglz.

Every heartbeat rewrites the node row's measurements (a GPU node's
telemetry is about 7 KB of JSON, its port counters about 4 KB), and every
registration and placement rewrites its desired state (about 57 KB for a
GPU node, most of it the engines' pinned requirements with their hashes).
PostgreSQL compresses a value that large before it stores it, with pglz
unless told otherwise, and pglz stored the desired state uncompressed
after trying (the hashes defeat it). Measured on PostgreSQL 15 through
the product's own paths, PostgreSQL's CPU alternated in the same minutes:
- desired.rebuild of one GPU node, as a placement or a registration
  writes it: 2.90-2.98 ms with pglz, 1.23-1.25 ms with lz4, the document
  stored in 57 KB against 31 KB;
- a simulated fleet's heartbeats through heartbeats.store_many, batches
  of 100: 0.52-0.68 ms a heartbeat with pglz, 0.45-0.54 ms with lz4 (six
  rounds each; three rounds before them were within noise).
Reading back costs the same either way.

Only the compression of values written from now on changes: the rows
stay as they are until next rewritten, which for measurements is within
a heartbeat. Setting it takes the table's lock for a catalog change, no
rewrite. A PostgreSQL that cannot (built without lz4, or older than 14)
keeps pglz: the migration warns and goes on.
"""

from typing import Any

from django.db import migrations, models


def _compression(method: str) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        node = apps.get_model("inventory", "Node")
        quote = schema_editor.quote_name
        columns = [f.column for f in node._meta.concrete_fields if isinstance(f, models.JSONField)]
        clauses = ", ".join(f"ALTER COLUMN {quote(c)} SET COMPRESSION {method}" for c in columns)
        # One statement, so the lock is taken once; a server that cannot
        # refuses it whole, and the block ends without changing anything.
        schema_editor.execute(
            f"""
DO $$
BEGIN
    ALTER TABLE {quote(node._meta.db_table)} {clauses};
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value OR syntax_error THEN
    RAISE WARNING 'llmgw: this PostgreSQL has no lz4; the node row stays compressed with pglz';
END $$"""
        )

    return run


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("inventory", "0013_hearing"),
    ]

    operations = [
        # Back to the server's default_toast_compression, as before.
        migrations.RunPython(_compression("lz4"), _compression("default")),
    ]
