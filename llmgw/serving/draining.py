"""Draining a held facility domain: its replicas move out one at a time.

Per hold with drain, one replica at a time: place its replacement (the
hold keeps placement out of the domain), wait until the replacement is
ready, then release the old one. A replica is never released before its
replacement serves, so a model never drops below what it was serving,
always_running included. While a move is under way the old replica is not
counted among the model's live ones, or the reconciler would see one too
many and take the replacement back. Each step says on the hold what it
did or what it is waiting for (`llmgw ctl facility` shows it).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from llmgw.catalog.models import Model
from llmgw.facility import domains
from llmgw.facility import services as facility
from llmgw.facility.models import DRAINED, Hold
from llmgw.inventory.models import Node
from llmgw.serving import placing
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica, Shard

log = logging.getLogger("llmgw.draining")

GONE = (ReplicaState.FAILED, ReplicaState.LOST)


def members(key: str) -> set[int]:
    """The pks of the nodes in a domain, as their labels say now."""
    nodes = Node.objects.only("name", "agent_labels", "operator_labels")
    return {n.pk for n in nodes if key in domains.keys_of(n.name, n.labels)}


def step(model: Model, live: list[Replica], done: dict[str, Any]) -> list[Replica]:
    """One drain step for the model in every draining hold; returns the
    live replicas as the reconciler should count them."""
    if not Hold.objects.filter(drain=True).exists():
        return live
    moving_out: set[int] = set()
    for pk in Hold.objects.filter(drain=True).values_list("pk", flat=True):
        with transaction.atomic():
            hold = Hold.objects.select_for_update().filter(pk=pk, drain=True).first()
            if hold is None:
                continue
            old = _step(hold, model, live, done)
            if old is not None:
                moving_out.add(old)
    if not moving_out and not done.get("drain_placed"):
        return live
    placed = set(done.get("drain_placed", []))
    counted = [r for r in live if r.pk not in moving_out]
    counted += [r for r in Replica.objects.filter(pk__in=placed) if r not in counted]
    return counted


def _say(hold: Hold, text: str, moving: dict[str, Any] | None) -> None:
    if hold.progress != text:
        log.info("%s: %s", hold.domain, text)
    facility.record_progress(hold, text, moving)


def _step(hold: Hold, model: Model, live: list[Replica], done: dict[str, Any]) -> int | None:
    """Returns the pk of this model's replica being moved out, if any."""
    where = domains.describe(hold.domain)
    moving = hold.moving
    if moving and moving.get("model") != model.name:
        return None  # another model's move: one at a time per hold
    if moving:
        return _follow(hold, model, moving, where)
    inside = members(hold.domain)
    mine = [
        r for r in live if r.state not in GONE and any(s.node_id in inside for s in r.shards.all())
    ]
    if not mine:
        if not Shard.objects.filter(node_id__in=inside).exists():
            _say(hold, f"{DRAINED}: nothing runs in {where}", None)
        return None
    old = min(mine, key=lambda r: r.pk)
    replica, result = placing.place_replica(model.name)
    if replica is None:
        first = result.explanation.render().splitlines()
        why = "; ".join(first[:3])
        _say(hold, f"cannot move {model.name} replica #{old.pk} out of {where}: {why}", None)
        return None
    done.setdefault("drain_placed", []).append(replica.pk)
    nodes = ", ".join(s.node.name for s in replica.shards.select_related("node"))
    _say(
        hold,
        f"moving {model.name} replica #{old.pk} out of {where}: placed #{replica.pk} on "
        f"{nodes}; waiting until it is ready, then #{old.pk} is released",
        {"model": model.name, "old": old.pk, "new": replica.pk},
    )
    return int(old.pk)


def _follow(hold: Hold, model: Model, moving: dict[str, Any], where: str) -> int | None:
    old = Replica.objects.filter(pk=moving["old"]).first()
    new = Replica.objects.filter(pk=moving["new"]).first()
    if old is None:
        _say(hold, f"{model.name} replica #{moving['old']} left {where} on its own", None)
        return None
    if new is None or new.state in GONE:
        state = "released" if new is None else new.state
        _say(
            hold,
            f"replacement #{moving['new']} of {model.name} replica #{old.pk} is {state}; "
            "placing another next round",
            None,
        )
        return None
    if new.state == ReplicaState.READY:
        placing.release_replica(old.pk)
        _say(
            hold,
            f"moved {model.name} replica #{old.pk} out of {where}: #{new.pk} is ready, "
            f"#{old.pk} released",
            None,
        )
        # Released: not to be counted among the live ones this round either.
        return int(old.pk)
    _say(
        hold,
        f"waiting for {model.name} replica #{new.pk} to be ready (it is {new.state}) before "
        f"releasing #{old.pk} in {where}",
        moving,
    )
    return int(old.pk)
