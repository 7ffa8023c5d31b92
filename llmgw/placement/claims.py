"""A decision's claims on node views, added and taken back: the one place
that says what a shard holds of a node (its cards, memory, cores, a
replica of its model, its watts).

Pure, like the scheduler: the warm fleet advances its views with a
committed decision (added), explain takes a decision's own claims out to
judge its nodes as they were (taken back), and what-if does both. Written
twice before, the undo that explain used forgot the watts, so a capped
domain read as drawing its own replica's power twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from .types import Decision, NodeView, Shard


def added(view: NodeView, model: str, shard: Shard) -> NodeView:
    """The view once this shard of the model holds its claims there."""
    taken = set(shard.gpu_indices)
    return replace(
        view,
        gpus=tuple(replace(g, allocated=True) if g.index in taken else g for g in view.gpus),
        claimed_memory_bytes=view.claimed_memory_bytes + shard.memory_bytes,
        claimed_cores=view.claimed_cores + shard.cpu_cores,
        models={**view.models, model: view.models.get(model, 0) + 1},
        declared_w=_watts(view.declared_w, shard.power_w, declared=True),
        measured_w=_watts(view.measured_w, shard.power_w, declared=False),
    )


def taken_back(view: NodeView, model: str, shard: Shard) -> NodeView:
    """The view once this shard's claims are gone: `added` undone."""
    freed = set(shard.gpu_indices)
    models = dict(view.models)
    models[model] = models.get(model, 0) - 1
    if models[model] <= 0:
        del models[model]
    watts = -(shard.power_w or 0.0)
    return replace(
        view,
        gpus=tuple(replace(g, allocated=False) if g.index in freed else g for g in view.gpus),
        claimed_memory_bytes=max(view.claimed_memory_bytes - shard.memory_bytes, 0),
        claimed_cores=max(view.claimed_cores - shard.cpu_cores, 0),
        models=models,
        declared_w=_watts(view.declared_w, watts, declared=True),
        measured_w=_watts(view.measured_w, watts, declared=False),
    )


def _watts(before: float | None, watts: float | None, declared: bool) -> float | None:
    # What is declared starts from nothing; what was never measured stays
    # unknown (unknown is not zero); a draw never goes below nothing.
    if not watts or (before is None and (not declared or watts < 0)):
        return before
    return max((before or 0.0) + watts, 0.0)


def apply_to_views(views: Iterable[NodeView], decision: Decision) -> list[NodeView]:
    """The views as they will read once the decision's claims exist."""
    return _each(views, [decision], added)


def without(views: Iterable[NodeView], decision: Decision) -> list[NodeView]:
    """The views as they read before the decision's claims existed."""
    return released(views, [decision])


def released(views: Iterable[NodeView], decisions: Iterable[Decision]) -> list[NodeView]:
    """The views once these decisions' claims are gone."""
    return _each(views, decisions, taken_back)


def _each(
    views: Iterable[NodeView],
    decisions: Iterable[Decision],
    change: Callable[[NodeView, str, Shard], NodeView],
) -> list[NodeView]:
    shards: dict[str, list[tuple[str, Shard]]] = {}
    for d in decisions:
        for s in d.shards:
            shards.setdefault(s.node, []).append((d.model, s))
    out = []
    for v in views:
        for model, s in shards.get(v.name, ()):
            v = change(v, model, s)
        out.append(v)
    return out
