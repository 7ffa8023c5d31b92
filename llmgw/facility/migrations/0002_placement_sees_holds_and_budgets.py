"""Once installed triggers on the hold and cap tables that wrote into
serving's change log. The log is serving's, and so are its triggers now:
serving's migration 0010 installs them (and drops these where a database
still has them). Kept, empty, so that databases that ran it stay in step.
"""

from django.db import migrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("facility", "0001_holds_and_budgets")]
    operations: list[migrations.operations.base.Operation] = []
