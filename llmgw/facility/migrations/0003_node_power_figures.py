"""Each node's derived and measured power (facility.power.derived and
.measured) and the facility domains it is in (facility.domains.keys_of)
kept on its row, computed by PostgreSQL whenever the row is written,
whoever writes it.

The database's check of every placement in a capped domain
(serving.checked) summed them for each node of the domain from its
readings' JSON, with its shards' declared watts: 100 ms a placement in
a hall of 5,000 nodes, under the hall's cap row lock, so every placement
there waited for the one before (about 10 a second, whatever the cores).
It also read which nodes are in each domain from their labels' JSON.
Computed when the row is written (about 20 microseconds a heartbeat),
the check compares an array and reads two numbers a node. The facility
listing (facility.readings) reads the figures too. The domains are not
indexed: a GIN index's pending list grows with every heartbeat that
cannot update its row in place, and every search reads that list.

The functions follow power.derived, power.measured and domains.keys_of
exactly (tests/facility/test_node_figures.py holds them to each other):
only numbers count (a JSON true is no watt), a node none of whose cards
or packages said a figure has NULL, never 0, and an operator's label
wins over the agent's. LEVELS (llmgw.locations) is written out here: a
level added there needs a migration that recreates facility_domain_keys.
Stored generated columns are recomputed by every UPDATE of the row, which
is why they are kept small. Not in the Node model: only raw SQL reads them.
"""

from django.db import migrations

ELEMENTS = (
    "jsonb_array_elements(CASE WHEN jsonb_typeof({0}) = 'array' THEN {0} ELSE '[]'::jsonb END)"
)

FUNCTIONS = f"""
CREATE FUNCTION facility_derived_w(telemetry jsonb) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sum((g ->> 'power_limit_w')::float8) FROM {ELEMENTS.format("telemetry")} g
    WHERE jsonb_typeof(g -> 'power_limit_w') = 'number'
$$;
CREATE FUNCTION facility_measured_w(telemetry jsonb, sensors jsonb) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sum(w) FROM (
        SELECT (g ->> 'power_draw_w')::float8 FROM {ELEMENTS.format("telemetry")} g
        WHERE jsonb_typeof(g -> 'power_draw_w') = 'number'
        UNION ALL
        SELECT (p ->> 'power_w')::float8 FROM {ELEMENTS.format("sensors -> 'cpu_packages'")} p
        WHERE jsonb_typeof(p -> 'power_w') = 'number'
    ) AS readings(w)
$$;
-- An operator's label over the agent's (Node.labels); an empty value is no place.
CREATE FUNCTION facility_domain_keys(name text, agent jsonb, operator jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg(key ORDER BY o) FROM (
        SELECT level || '=' || value, o
        FROM unnest(ARRAY['site', 'room', 'row', 'rack', 'pdu']) WITH ORDINALITY AS l(level, o),
        LATERAL (SELECT NULLIF(COALESCE(
            operator ->> ('llmgw.io/' || level), agent ->> ('llmgw.io/' || level)), '')) AS v(value)
        WHERE value IS NOT NULL
        UNION ALL
        SELECT name, 6
    ) AS k(key, o)
$$;
ALTER TABLE inventory_node
    ADD COLUMN derived_w float8 GENERATED ALWAYS AS (facility_derived_w(gpu_telemetry)) STORED,
    ADD COLUMN measured_w float8
        GENERATED ALWAYS AS (facility_measured_w(gpu_telemetry, sensors)) STORED,
    ADD COLUMN domain_keys text[]
        GENERATED ALWAYS AS (facility_domain_keys(name, agent_labels, operator_labels)) STORED;
"""

UNDO = """
ALTER TABLE inventory_node DROP COLUMN derived_w, DROP COLUMN measured_w, DROP COLUMN domain_keys;
DROP FUNCTION facility_domain_keys(text, jsonb, jsonb);
DROP FUNCTION facility_derived_w(jsonb);
DROP FUNCTION facility_measured_w(jsonb, jsonb);
"""


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("facility", "0002_placement_sees_holds_and_budgets"),
        ("inventory", "0013_hearing"),
    ]
    operations = [migrations.RunSQL(FUNCTIONS, UNDO)]
