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

from llmgw.catalog.models import Engine
from llmgw.inventory.models import ModelHolding, Node
from llmgw.serving.models import Shard


def engine_specs(wanted: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The engines to converge on: the default of each engine, plus every
    version a shard here asks for; only ones the catalog can say how to get."""
    rows = Engine.objects.all()
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
    """Recompute the desired state of the given nodes (all when None)."""
    nodes = Node.objects.all() if node_ids is None else Node.objects.filter(pk__in=set(node_ids))
    drivers = dict(nodes.values_list("pk", "nvidia_driver"))
    ids = list(drivers)
    shards: dict[int, list[Shard]] = defaultdict(list)
    for shard in Shard.objects.filter(node_id__in=ids).select_related(
        "replica__profile", "replica__model"
    ):
        shards[shard.node_id].append(shard)
    holdings = {
        (h.node_id, h.model_name): h.path for h in ModelHolding.objects.filter(node_id__in=ids)
    }
    defaults = engine_specs(set())
    for node_id in ids:
        mine = sorted(shards[node_id], key=lambda s: (s.replica_id, s.rank))
        wanted = {(s.replica.profile.engine, s.replica.profile.engine_version) for s in mine}
        engines = engine_specs(wanted) if any(v for _, v in wanted) else defaults
        if not drivers[node_id]:
            engines = [e for e in engines if not _nvidia_only(e)]
        desired = {"engines": engines, "shards": [shard_spec(s, holdings) for s in mine]}
        Node.objects.filter(pk=node_id).update(desired=desired, desired_digest=digest(desired))
