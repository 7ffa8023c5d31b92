"""A decision's claims on node views, added and taken back: the one undo.
What a shard holds of a node (its cards, memory, cores, watts) each rule
says of itself (rules.py, Rule.holds); a replica of its model, which
spread counts, is added here.

Pure, like the scheduler: the warm fleet advances its views with a
committed decision (added), explain takes a decision's own claims out to
judge its nodes as they were (taken back), and what-if does both. Written
twice before, the undo that explain used forgot the watts, so a capped
domain read as drawing its own replica's power twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from .rules import RULES
from .types import Decision, NodeView, Shard


def added(view: NodeView, model: str, shard: Shard) -> NodeView:
    """The view once this shard of the model holds its claims there."""
    return _claimed(view, model, shard, 1)


def taken_back(view: NodeView, model: str, shard: Shard) -> NodeView:
    """The view once this shard's claims are gone: `added` undone."""
    return _claimed(view, model, shard, -1)


def _claimed(view: NodeView, model: str, shard: Shard, sign: int) -> NodeView:
    # What each rule counts (cards, memory, cores, watts: rules.py), and a
    # replica of the model, which spread counts.
    changes: dict[str, object] = {}
    for r in RULES:
        changes.update(r.holds(view, shard, sign))
    models = dict(view.models)
    count = models.get(model, 0) + sign
    if count > 0:
        models[model] = count
    else:
        models.pop(model, None)
    return replace(view, models=models, **changes)  # type: ignore[arg-type]


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
