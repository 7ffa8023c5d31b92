"""A fabric mapped from another of its nodes is no change of the fleet.

A map's analysis names the port ibnetdiscover ran from (initiated_from),
and each sweep, or a map asked for, runs it on whichever node is asked:
0008 logged every change of the analysis as a change of every node, so
each such map had every process's warm fleet read the whole fleet again.
At 5,000 nodes each read took 4 to 10 s of a web process while the
placements and the heartbeats it serves waited (heartbeats up to 14 s
behind, two placements failing their statement timeout, in
bench/fleet.py during its placements). Placement reads the map's
switches, adapters and degraded links, never where it was taken from;
the analysis less that one key is what counts now.
"""

from django.db import migrations

TRIGGER = "fabrics_fabricmap_placement_change_update"


def _create(when: str) -> str:
    return (
        f"DROP TRIGGER IF EXISTS {TRIGGER} ON fabrics_fabricmap;"
        f"CREATE TRIGGER {TRIGGER} AFTER UPDATE ON fabrics_fabricmap FOR EACH ROW "
        f"WHEN ({when}) EXECUTE FUNCTION serving_note_node_change('');"
    )


SOURCE_LEFT_OUT = (
    "OLD.fabric_id IS DISTINCT FROM NEW.fabric_id"
    " OR (OLD.analysis - 'initiated_from') IS DISTINCT FROM (NEW.analysis - 'initiated_from')"
)
# As 0008 left it.
WHOLE_ANALYSIS = (
    "OLD.fabric_id IS DISTINCT FROM NEW.fabric_id OR OLD.analysis IS DISTINCT FROM NEW.analysis"
)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("serving", "0013_change_log_xids_distinct")]

    operations = [migrations.RunSQL(_create(SOURCE_LEFT_OUT), _create(WHOLE_ANALYSIS))]
