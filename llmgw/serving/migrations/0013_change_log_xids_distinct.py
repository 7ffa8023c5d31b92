"""The change log's transaction ids counted as nearly all distinct by the
planner, whatever ANALYZE last saw.

Placement reads the log on generic plans (serving.placing), where how many
rows `xid = ANY($1)` matches comes from the column's statistics alone. A
change of many nodes in one transaction (a bulk load, a label set on a
whole rack) leaves thousands of rows with one xid; analysed then, the
column had five distinct values in 85,000 rows, each such test was taken
to match a fifth of the log, and every look and every check scanned all
of it: 45 committed placements a second instead of about 300 in
`make bench-placement`. Most transactions log a handful of rows, so
"every row its own xid" is the estimate that stays right. ANALYZE now
so that a log analysed already is planned from the new figure.
"""

from django.db import migrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("serving", "0012_key_limits_and_usage")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE serving_nodechange ALTER COLUMN xid SET (n_distinct = -1);"
            " ANALYZE serving_nodechange",
            "ALTER TABLE serving_nodechange ALTER COLUMN xid RESET (n_distinct)",
        )
    ]
