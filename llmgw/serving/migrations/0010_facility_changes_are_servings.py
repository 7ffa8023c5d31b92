"""A hold or cap changed is logged once, by serving's own triggers.

Facility's migration 0002 installed triggers of its own on the hold and
cap tables, with a function that wrote into serving's change log; serving's
0006 then installed its placement triggers on the same tables, so each
change was logged twice, once by an app that does not own the log. The
log and its triggers are serving's: facility's are dropped here (0002 no
longer installs them).
"""

from django.db import migrations

TABLES = ("facility_hold", "facility_budget")

INSTALL = "\n".join(
    [
        *(
            f"DROP TRIGGER IF EXISTS {t}_rows ON {t}; DROP TRIGGER IF EXISTS {t}_update ON {t};"
            for t in TABLES
        ),
        "DROP FUNCTION IF EXISTS facility_note_change();",
    ]
)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("serving", "0009_change_kinds"),
        ("facility", "0002_placement_sees_holds_and_budgets"),
    ]

    # Nothing to put back: serving's triggers (0006) log these changes.
    operations = [migrations.RunSQL(INSTALL, migrations.RunSQL.noop)]
