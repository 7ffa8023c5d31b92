"""Each node's desired state: the engines it should have and the shards it
should run, rebuilt explicitly whenever placement changes a node's shards
(never by signals) and stored on the node row with its digest, so a heartbeat answers with
it from its single UPDATE ... RETURNING, and only when the digest the
heartbeat sent differs."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import OuterRef, Subquery

from llmgw.catalog.models import Engine
from llmgw.inventory.models import ModelHolding, Node
from llmgw.serving.models import Shard


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


def shard_spec(shard: Shard, holdings: dict[tuple[int, str], str]) -> dict[str, Any]:
    replica, profile, model = shard.replica, shard.replica.profile, shard.replica.model
    return {
        "id": shard.shard_id,
        "replica": replica.pk,
        "rank": shard.rank,
        "model": model.name,
        "engine": profile.engine,
        "engine_version": profile.engine_version or None,
        "model_path": holdings.get((shard.node_id, model.name)),
        "source": model.source,
        "args": list(profile.args or []),
        "threads": profile.cpu_cores or None,
        "gpus": list(shard.gpu_indices or []),
        "env": dict(replica.env or {}),
        "generation": shard.generation,
    }


def digest(desired: dict[str, Any]) -> str:
    """What a heartbeat sends back to say which desired state its node holds."""
    return hashlib.sha256(json.dumps(desired, sort_keys=True).encode()).hexdigest()


def rebuild(node_ids: Iterable[int] | None = None) -> None:
    """Recompute the desired state of the given nodes (all when None).

    Placement calls this under its lock for every decision, so it costs
    three round trips whatever the number of nodes: their shards (each
    with its model's path on that node), the engine catalog, and one
    UPDATE that picks each node's document by its NVIDIA driver itself."""
    if node_ids is None:
        ids = list(Node.objects.values_list("pk", flat=True))
    else:
        ids = sorted(set(node_ids))
    shards: dict[int, list[Shard]] = defaultdict(list)
    holdings: dict[tuple[int, str], str] = {}
    path = ModelHolding.objects.filter(
        node_id=OuterRef("node_id"), model_name=OuterRef("replica__model__name")
    ).values("path")[:1]
    for shard in (
        Shard.objects.filter(node_id__in=ids)
        .select_related("replica__profile", "replica__model")
        .annotate(model_path=Subquery(path))
        # Sorted below: the models' ordering would join and sort in SQL.
        .order_by()
    ):
        shards[shard.node_id].append(shard)
        if shard.model_path is not None:
            holdings[(shard.node_id, shard.replica.model.name)] = shard.model_path
    catalog = list(Engine.objects.all())
    defaults = engine_specs(set(), catalog)
    docs: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for node_id in ids:
        mine = sorted(shards[node_id], key=lambda s: (s.replica_id, s.rank))
        wanted = {(s.replica.profile.engine, s.replica.profile.engine_version) for s in mine}
        engines = engine_specs(wanted, catalog) if any(v for _, v in wanted) else defaults
        specs = [shard_spec(s, holdings) for s in mine]
        # With an NVIDIA driver, and without: the node row says which.
        docs[node_id] = (
            {"engines": engines, "shards": specs},
            {"engines": [e for e in engines if not _nvidia_only(e)], "shards": specs},
        )
    _write(docs)


# Each node's document by its NVIDIA driver; the document without one is
# sent only where it differs.
WRITE = """
UPDATE inventory_node AS n
SET desired = CASE WHEN n.nvidia_driver <> '' THEN v.gpu ELSE COALESCE(v.bare, v.gpu) END,
    desired_digest = CASE WHEN n.nvidia_driver <> '' THEN v.gpu_digest
                          ELSE COALESCE(v.bare_digest, v.gpu_digest) END
FROM (VALUES {rows}) AS v(id, gpu, gpu_digest, bare, bare_digest)
WHERE n.id = v.id
"""
WRITE_ROW = "(%s::bigint, %s::jsonb, %s::text, %s::jsonb, %s::text)"
# Five parameters a node, well under PostgreSQL's 65,535 a statement.
WRITE_CHUNK = 2_000


def _write(docs: dict[int, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    if connection.vendor != "postgresql":
        drivers = dict(Node.objects.filter(pk__in=list(docs)).values_list("pk", "nvidia_driver"))
        for pk, driver in drivers.items():
            doc = docs[pk][0 if driver else 1]
            Node.objects.filter(pk=pk).update(desired=doc, desired_digest=digest(doc))
        return
    items = list(docs.items())
    for start in range(0, len(items), WRITE_CHUNK):
        chunk = items[start : start + WRITE_CHUNK]
        params: list[Any] = []
        for pk, (gpu, bare) in chunk:
            same = bare == gpu
            params += [
                pk,
                json.dumps(gpu),
                digest(gpu),
                None if same else json.dumps(bare),
                None if same else digest(bare),
            ]
        with connection.cursor() as cursor:
            cursor.execute(WRITE.format(rows=", ".join([WRITE_ROW] * len(chunk))), params)
