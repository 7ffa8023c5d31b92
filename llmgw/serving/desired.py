"""Each node's desired state: the engines it should have and the shards it
should run, rebuilt explicitly whenever placement changes a node's shards
(never by signals) and stored on the node row with its digest, so a heartbeat answers with
it from its single UPDATE ... RETURNING, and only when the digest the
heartbeat sent differs."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

from llmgw.catalog.models import Engine
from llmgw.database import prepared
from llmgw.inventory import desired as inventory_desired
from llmgw.inventory.models import Node
from llmgw.serving import followed


def engine_specs(
    wanted: set[tuple[str, str]], rows: Iterable[Engine] | None = None
) -> list[dict[str, Any]]:
    """The engines to converge on: the default of each engine, plus every
    version a shard here asks for; only ones the catalog can say how to get.
    `rows`: the catalog's engines, when already read."""
    rows = Engine.objects.all() if rows is None else rows
    out = {}
    for e in rows:
        if e.default or (e.name, e.version) in wanted:
            spec = {"name": e.name, "version": e.version, "builds": e.builds}
            # Only when set: a node's desired state is written on every placement.
            if e.package:
                spec["package"] = e.package
            if e.mirror:
                spec["mirror"] = e.mirror
            out[(e.name, e.version)] = spec
    return [out[k] for k in sorted(out)]


def _nvidia_only(spec: dict[str, Any]) -> bool:
    """vLLM and SGLang as packages: a node without an NVIDIA driver would leave them
    alone anyway, and their locks are tens of kilobytes in every heartbeat answer."""
    return not spec["builds"] and (spec.get("package") or {}).get("needs") == "nvidia"


# The shards of the given nodes, with what their specs read and each
# model's path on that node. Plain SQL: placement rebuilds under its lock,
# and compiling the same query through the ORM cost more than running it.
SHARDS = """
SELECT s.node_id, s.replica_id, s.rank, s.gpu_indices, s.generation, r.env,
       m.name, m.source, p.engine, p.engine_version, p.args, p.cpu_cores,
       (SELECT h.path FROM inventory_modelholding h
        WHERE h.node_id = s.node_id AND h.model_name = m.name LIMIT 1)
FROM serving_shard s
JOIN serving_replica r ON r.id = s.replica_id
JOIN catalog_model m ON m.id = r.model_id
JOIN catalog_profile p ON p.id = r.profile_id
WHERE s.node_id IN ({nodes})
"""
SHARD_COLUMNS = (
    "node_id replica_id rank gpu_indices generation env "
    "model source engine engine_version args cpu_cores model_path"
).split()
# JSON columns may come back as text from a raw cursor.
JSON_COLUMNS = ("gpu_indices", "env", "args")
# Node keys per statement: each statement's parameter list stays small.
READ_CHUNK = 900


def _shards(ids: list[int]) -> tuple[list[dict[str, Any]], Check]:
    """The nodes' shards as rows of SHARD_COLUMNS, and what the change log
    says of the engine catalog, read with them."""
    rows = []
    check = Check("", None, True, False)
    params = CATALOG.cursor.params()
    with prepared.cursor() as cursor:
        for start in range(0, len(ids), READ_CHUNK):
            chunk = ids[start : start + READ_CHUNK]
            # replace, not format: the log's SQL has braces of its own.
            sql = WITH_CHANGES.replace("{nodes}", ", ".join(["%s"] * len(chunk)))
            cursor.execute(sql, [*params, *chunk])
            for values in cursor.fetchall():
                if start == 0:
                    check = Check(*values[:4])
                values = values[4:]
                if values[0] is None:
                    continue  # the LEFT JOIN's row: no shard here
                row = dict(zip(SHARD_COLUMNS, values, strict=True))
                for column in JSON_COLUMNS:
                    if isinstance(row[column], str):
                        row[column] = json.loads(row[column])
                rows.append(row)
    return rows, check


def shard_spec(row: dict[str, Any]) -> dict[str, Any]:
    """A shard as its node's agent is told to run it (a row of SHARDS)."""
    return {
        "id": f"r{row['replica_id']}-{row['rank']}",
        "replica": row["replica_id"],
        "rank": row["rank"],
        "model": row["model"],
        "engine": row["engine"],
        "engine_version": row["engine_version"] or None,
        "model_path": row["model_path"],
        "source": row["source"],
        "args": list(row["args"] or []),
        "threads": row["cpu_cores"] or None,
        "gpus": list(row["gpu_indices"] or []),
        "env": dict(row["env"] or {}),
        "generation": row["generation"],
    }


# The digest is the stored row's: inventory's (it answers heartbeats with it).
digest = inventory_desired.digest


def _document(engines_text: str, shards: list[dict[str, Any]]) -> str:
    """json.dumps({"engines": ..., "shards": shards}, sort_keys=True), the
    engines already written: the same text, so the same digest."""
    return f'{{"engines": {engines_text}, "shards": {json.dumps(shards, sort_keys=True)}}}'


# On PostgreSQL what the change log says of the engine catalog
# (followed.py: the snapshot, and whether an engine changed since this
# process last checked, here or in this transaction) comes back on every
# row of the nodes' shards (a row with no shard when the nodes have none):
# under placement's lock a round trip of its own was a tenth of a
# placement. Placement rebuilds on every decision, and the catalog's
# package locks, tens of kilobytes of JSON an engine, were read and
# decoded each time.
WITH_CHANGES = f"""
SELECT v.*, s.*
FROM (SELECT {followed.SNAPSHOT}, {followed.since(followed.ENGINE)} AS changed,
             {followed.own(followed.ENGINE)} AS own) AS v
LEFT JOIN ({SHARDS}) AS s ON true
"""


class Check(NamedTuple):
    """The change log as read with the shards (followed.SNAPSHOT, since, own)."""

    snapshot: str
    own_xid: str | None
    changed: bool
    own: bool


# The (engine, version) pairs a node's shards ask for.
Wanted = frozenset[tuple[str, str]]


class Kept(NamedTuple):
    """The catalog as read, and each set of wanted engines written from it
    as JSON (with an NVIDIA driver and without; None: the same): one
    tuple, replaced whole, as threads share it."""

    rows: list[Engine]
    written: dict[Wanted, tuple[str, str | None]]

    def engines(self, wanted: Wanted) -> tuple[str, str | None]:
        """The engines a node with these shards' engines converges on, as JSON."""
        written = self.written.get(wanted)
        if written is None:
            specs = engine_specs(set(wanted), self.rows)
            bare = [e for e in specs if not _nvidia_only(e)]
            written = self.written[wanted] = (
                json.dumps(specs, sort_keys=True),
                None if bare == specs else json.dumps(bare, sort_keys=True),
            )
        return written


def read_engines() -> list[Engine]:
    """The engine catalog as the copy holds it (followed.READERS)."""
    return list(Engine.objects.all())


class Catalog:
    """This process's copy of the engine catalog, kept until the change
    log has a row of kind 'engine' it has not read (followed.py)."""

    def __init__(self) -> None:
        self.cursor = followed.Cursor(followed.ENGINE)
        self.clear()

    def clear(self) -> None:
        self.kept: Kept | None = None
        self.cursor.reset()

    def current(self, check: Check | None = None) -> Kept:
        """The engine catalog as stored now (shared: read, never changed);
        `check`: the log as just read with the shards, else read here."""
        if check is None:
            with prepared.cursor() as cursor:
                cursor.execute(CHECK, self.cursor.params())
                check = Check(*cursor.fetchone())
        kept = self.kept
        if check.own:
            # This transaction changed engines: read for it alone. Kept
            # by no one: the next check, wherever it is made, reads again.
            self.clear()
            return Kept(read_engines(), {})
        if kept is not None and self.cursor.fresh and not check.changed:
            self.cursor.moved(check.snapshot, check.own_xid)
            return kept
        # Read after the check's snapshot: at worst newer, read again next time.
        kept = Kept(read_engines(), {})
        self.cursor.moved(check.snapshot, check.own_xid)
        self.kept = kept
        return kept


CHECK = (
    f"SELECT {followed.SNAPSHOT}, {followed.since(followed.ENGINE)}, "
    f"{followed.own(followed.ENGINE)}"
)
CATALOG = Catalog()


def rebuild(node_ids: Iterable[int] | None = None) -> None:
    """Recompute the desired state of the given nodes (all when None).

    Placement calls this under its lock for every decision, so it costs
    two round trips whatever the number of nodes: their shards (each with
    its model's path on that node) read with what the change log says of
    the engine catalog (the catalog itself only when it changed), and one
    UPDATE that picks each node's document by its NVIDIA driver itself;
    for more than one node, a third first locks their rows in name order
    (_write)."""
    if node_ids is None:
        ids = list(Node.objects.values_list("pk", flat=True))
    else:
        ids = sorted(set(node_ids))
    shards: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows, check = _shards(ids)
    for row in rows:
        shards[row["node_id"]].append(row)
    catalog = CATALOG.current(check if ids else None)
    docs: dict[int, tuple[str, str | None]] = {}
    for node_id in ids:
        mine = sorted(shards[node_id], key=lambda r: (r["replica_id"], r["rank"]))
        wanted = frozenset((r["engine"], r["engine_version"]) for r in mine)
        if not any(version for _, version in wanted):
            wanted = frozenset()  # the defaults alone
        engines = catalog.engines(wanted)
        shard_specs = [shard_spec(r) for r in mine]
        # With an NVIDIA driver, and without (None: the same): the node row says which.
        gpu = _document(engines[0], shard_specs)
        docs[node_id] = (gpu, None if engines[1] is None else _document(engines[1], shard_specs))
    inventory_desired.store(docs)
