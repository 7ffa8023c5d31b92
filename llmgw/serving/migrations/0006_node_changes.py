"""The log of which nodes changed in a way placement reads, written by the
database itself (PostgreSQL triggers), so that each process's warm fleet
(llmgw.serving.warm) re-reads only those nodes.

Triggers rather than calls in the services: the heartbeat, cordons, labels,
claims, fabric sweeps and the catalog all change what placement sees, from
different apps and processes, and a write path that forgot to say so would
leave a process placing on a fleet that no longer exists. Each row carries
the writing transaction's id (xid8): a reader takes every row at or above
the oldest transaction still running when it last read, so a transaction
that commits after a younger one is still seen (see warm.py, which also
prunes the log).

Only columns placement reads fire a trigger: a heartbeat that changes
nothing but measurements writes no row. A node_id of NULL means the whole
fleet (a fabric map, a physical fabric, a profile's declared claims, a
facility hold or power budget). Measured power, which changes with every
reading, is not logged: warm.py reads it again on a timer for the nodes
in a capped domain, the only ones whose placement it moves.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# Node columns snapshot.node_views reads (last_heartbeat_at aside: the warm
# fleet follows staleness by the clock). A column placement starts to read
# belongs here too.
NODE_COLUMNS = (
    "name state cordoned cordon_reason operator_labels agent_labels cpus "
    "memory_total_bytes engines engines_probed fabrics active_fabrics gpu_topology "
    "imex heartbeat_interval_s wear_reported_at wear_changed_at"
).split()
GPU_COLUMNS = (
    "node_id index uuid gpu_class memory_total_bytes unhealthy_reason missing "
    "nvlink_domain nvlink_problem"
).split()
PORT_COLUMNS = (
    "node_id device link_layer state phys_state node_guid port_guid declared_fabric "
    "physical_fabric_id roce_network"
).split()


def changed(columns: list[str]) -> str:
    return " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)


def quoted(columns: list[str]) -> list[str]:
    # "index" is a keyword.
    return [f'"{c}"' if c == "index" else c for c in columns]


FUNCTION = """
CREATE TABLE serving_nodechange (
    id bigserial PRIMARY KEY,
    node_id bigint,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX serving_nodechange_xid ON serving_nodechange (xid);

-- One row: the oldest running transaction when the log was last marked,
-- and when (warm.py prunes what was older than the previous mark).
CREATE TABLE serving_nodechange_mark (
    id smallint PRIMARY KEY CHECK (id = 1),
    xmin_mark xid8 NOT NULL,
    marked_at timestamptz NOT NULL
);
INSERT INTO serving_nodechange_mark VALUES (1, '0', now());

CREATE FUNCTION serving_note_node_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    key text := TG_ARGV[0];
    before bigint;
    after bigint;
BEGIN
    IF key = '' THEN
        INSERT INTO serving_nodechange (node_id) VALUES (NULL);
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN before := (to_jsonb(OLD) ->> key)::bigint; END IF;
    IF TG_OP <> 'DELETE' THEN after := (to_jsonb(NEW) ->> key)::bigint; END IF;
    IF before IS NOT NULL THEN
        INSERT INTO serving_nodechange (node_id) VALUES (before);
    END IF;
    IF after IS NOT NULL AND after IS DISTINCT FROM before THEN
        INSERT INTO serving_nodechange (node_id) VALUES (after);
    END IF;
    RETURN NULL;
END $$;
"""

# (table, key column, columns whose update counts; None: every update)
TRIGGERS = [
    ("inventory_node", "id", NODE_COLUMNS),
    ("inventory_gpu", "node_id", GPU_COLUMNS),
    ("inventory_modelholding", "node_id", None),
    ("serving_shard", "node_id", ["node_id", "replica_id"]),
    ("serving_gpuclaim", "node_id", None),
    ("fabrics_port", "node_id", PORT_COLUMNS),
    ("fabrics_physicalfabric", "", None),
    ("fabrics_fabricmap", "", None),
    ("catalog_profile", "", ["memory_gb", "cpu_cores", "power_w"]),
    ("facility_hold", "", ["domain", "reason", "drain"]),
    ("facility_budget", "", ["domain", "watts"]),
]


def install_sql() -> str:
    out = [FUNCTION]
    for table, key, columns in TRIGGERS:
        name = f"{table}_placement_change"
        out.append(
            f"CREATE TRIGGER {name}_rows AFTER INSERT OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION serving_note_node_change('{key}');"
        )
        when = f" WHEN ({changed(quoted(columns))})" if columns else ""
        out.append(
            f"CREATE TRIGGER {name}_update AFTER UPDATE ON {table} FOR EACH ROW{when} "
            f"EXECUTE FUNCTION serving_note_node_change('{key}');"
        )
    return "\n".join(out)


def remove_sql() -> str:
    out = []
    for table, _, _ in TRIGGERS:
        name = f"{table}_placement_change"
        out.append(f"DROP TRIGGER IF EXISTS {name}_rows ON {table};")
        out.append(f"DROP TRIGGER IF EXISTS {name}_update ON {table};")
    out.append("DROP FUNCTION IF EXISTS serving_note_node_change();")
    out.append("DROP TABLE IF EXISTS serving_nodechange_mark;")
    out.append("DROP TABLE IF EXISTS serving_nodechange;")
    return "\n".join(out)


def install(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema_editor.execute(install_sql())


def remove(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema_editor.execute(remove_sql())


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [
        ("serving", "0005_replica_lost"),
        ("inventory", "0011_gpu_card_state"),
        ("fabrics", "0003_fabricmap_summary"),
        ("catalog", "0003_profile_power_and_keep_within"),
        ("facility", "0002_placement_sees_holds_and_budgets"),
    ]

    operations = [migrations.RunPython(install, remove)]
