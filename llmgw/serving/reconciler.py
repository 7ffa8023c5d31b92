"""Keeps each held model at its replica counts.

always_running replicas, always; up to under_load while the model's queue
says it is loaded, added one at a time after it has stayed loaded for
SCALE_UP_AFTER (the first of a model with none at once), and taken back
one at a time after it has been idle for SCALE_DOWN_AFTER (the
hysteresis: a burst does not start and stop engines that take minutes to
load). A failed replica is released whole and replaced. Placement
decides where; a replica placement cannot place is recorded with its
reasons (explain shows them) and tried again next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Prefetch
from django.utils import timezone

from llmgw.catalog.models import Model
from llmgw.database.atomic import atomic
from llmgw.inventory.models import Node
from llmgw.serving import draining, lost, placing, warm
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import HeldState, Replica

log = logging.getLogger("llmgw.reconciler")

SCALE_UP_AFTER = timedelta(seconds=30)
SCALE_DOWN_AFTER = timedelta(minutes=5)
# Requests waiting per live replica above which a model counts as loaded.
LOADED_DEPTH = 1.0


def queue_depth(model: str) -> float | None:
    """Requests waiting for the model, as the gateway last measured them."""
    try:
        from llmgw.serving.gateway.load import queue_depth as measured
    except ImportError:  # a control plane without the gateway has no load signal
        return None
    return measured(model)


def target(model: Model, live: int, now: datetime) -> int:
    base: int = model.always_running
    if model.under_load <= base:
        return base
    state, _ = HeldState.objects.get_or_create(model=model, defaults={"target": base})
    depth = queue_depth(model.name)
    loaded = depth is not None and depth >= LOADED_DEPTH * max(live, 1)
    if loaded:
        state.idle_since = None
        state.loaded_since = state.loaded_since or now
        # From zero at once: with no replica every request is refused, so
        # there is no burst to ride out, only clients waiting for the first.
        from_zero = live == 0 and state.target == 0
        if from_zero or now - state.loaded_since >= SCALE_UP_AFTER:
            state.target = min(model.under_load, max(state.target, live) + 1)
            state.loaded_since = now
    else:
        state.loaded_since = None
        state.idle_since = state.idle_since or now
        if now - state.idle_since >= SCALE_DOWN_AFTER and state.target > base:
            state.target -= 1
            state.idle_since = now
    state.target = max(base, min(state.target, model.under_load))
    state.queue_depth = depth
    state.save()
    held: int = state.target
    return held


# The advisory-lock key space of "a reconciler is working on model N".
MODEL_LOCK = 0x6C6D6777  # "lmgw"


@contextmanager
def reconciling(model: Model) -> Iterator[bool]:
    """Whether this process may reconcile the model now: one reconciler per
    model across every worker. Two workers counted the same live replicas
    and each placed the missing one, a duplicate in 2 of 3 rounds; the
    count and the placements now happen under a PostgreSQL advisory lock
    that a second reconciler does not wait for (the first is doing the
    work). A session lock, not a transaction: each placement commits on its
    own, as it always has."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [MODEL_LOCK, model.pk])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [MODEL_LOCK, model.pk])


def reconcile_model(model: Model, now: datetime | None = None) -> dict[str, Any]:
    with reconciling(model) as mine:
        if not mine:
            return {
                "released": [],
                "placed": [],
                "refused": None,
                "skipped": "reconciled elsewhere",
            }
        return _reconcile(model, now or timezone.now())


def _reconcile(model: Model, now: datetime) -> dict[str, Any]:
    done: dict[str, Any] = {"released": [], "placed": [], "refused": None}
    # Each shard's node by name alone: the whole rows (cards, topology,
    # engines) of every node that runs a replica cost seconds at 500
    # replicas, on every tick, and only the name is read here.
    nodes = Prefetch("shards__node", queryset=Node.objects.only("name"))
    replicas = list(Replica.objects.filter(model=model).prefetch_related(nodes))
    for replica in replicas:
        if replica.state in (ReplicaState.FAILED, ReplicaState.LOST):
            why = "; ".join(
                f"{s.node.name}: {s.message}" for s in replica.shards.all() if s.message
            )
            log.warning(
                "%s replica %s %s (%s): released whole, replacing",
                model.name,
                replica.pk,
                replica.state,
                why,
            )
            placing.release_replica(replica.pk)
            done["released"].append(replica.pk)
    live = [r for r in replicas if r.state not in (ReplicaState.FAILED, ReplicaState.LOST)]
    # Held domains being drained: one replica moved at a time (draining.py).
    live = draining.step(model, live, done)
    wanted = target(model, len(live), now)
    if len(live) < wanted:
        warm.FLEET.look()
    while len(live) + len(done["placed"]) < wanted:
        replica, result = placing.place_replica(model.name)
        if replica is None:
            # The profiles tried; every node's reason is judged when asked
            # (explain), not on every tick of a model that cannot be placed.
            tried = "; ".join(
                f"profile {n} (priority {p}): does not fit"
                for n, p, _ in result.explanation.attempts
            )
            done["refused"] = (
                f"{tried or 'no profiles to place'} (explain names every node's reason)"
            )
            break
        done["placed"].append(replica.pk)
    if len(live) > wanted:
        done["released"] += take_back(model, wanted)
    return done


@atomic
def take_back(model: Model, wanted: int) -> list[int]:
    """Release the replicas beyond `wanted`, counted again under the model's
    row lock. This tick read the model and its replicas earlier; a replica
    placed by hand since then raised always_running in its own transaction
    (serving.services.place_by_hand, same lock), and must not be taken back
    on the strength of the older count."""
    held = Model.objects.select_for_update(no_key=True).get(pk=model.pk)
    wanted = max(wanted, held.always_running)
    live = list(
        Replica.objects.filter(model=held).exclude(
            state__in=(ReplicaState.FAILED, ReplicaState.LOST)
        )
    )
    # What serves least goes first: not ready, then the newest (two stable
    # sorts, since a datetime cannot be negated into one key).
    newest_first = sorted(live, key=lambda r: (r.created_at, r.pk), reverse=True)
    order = sorted(newest_first, key=lambda r: r.state == ReplicaState.READY)
    released = []
    for replica in order[: max(len(live) - wanted, 0)]:
        placing.release_replica(replica.pk)
        released.append(replica.pk)
    return released


def reconcile_all() -> dict[str, Any]:
    # First what the staleness check found: a dead node's replicas are
    # replaced in this tick, not left "ready" until the node returns.
    lost.mark_lost()
    results = {}
    # A model held only under load is looked at with no replica too: its
    # load (the gateway's refused requests) is what places the first one.
    held = (
        Model.objects.filter(always_running__gt=0)
        | Model.objects.filter(under_load__gt=0)
        | Model.objects.filter(replicas__isnull=False)
    )
    for model in held.distinct().prefetch_related("profiles"):
        results[model.name] = reconcile_model(model)
    return results
