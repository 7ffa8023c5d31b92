"""A held model at a glance: its replicas ready against the count the
reconciler holds it at now, a word for where it stands, and its last
placement attempt. What an operator on call came to the held page for,
said from what the server knows (the counts, the reconciler's target,
the replicas' states, the last placement record), never guessed."""

from __future__ import annotations

from typing import Any

from llmgw.catalog.models import Model
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import HeldState, PlacementRecord

# Placed and on the way to serving: they count toward the target.
COMING = {ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.LOADING}

STATES = {
    "not held": "no count holds it: nothing keeps a replica running",
    "idle": "held only under load, and not loaded: no replica wanted now",
    "ready": "as many replicas ready as it is held at",
    "starting": "enough replicas placed, some still starting or loading",
    "short": "fewer replicas than it is held at; the last placement says why",
}


def target(model: Model, state: HeldState | None) -> int:
    """The replicas the reconciler keeps now: always_running, or more up to
    under_load while the model is loaded (its HeldState's target)."""
    base: int = model.always_running
    if model.under_load <= base or state is None:
        return base
    held: int = max(base, min(state.target, model.under_load))
    return held


def summary(model: Model) -> dict[str, Any]:
    """The model's replicas (prefetched) and its held_state and
    last_placement (selected with it) read, nothing else."""
    state = _related(model, "held_state")
    record: PlacementRecord | None = _related(model, "last_placement")
    states = [r.state for r in model.replicas.all()]
    ready = states.count(ReplicaState.READY)
    coming = sum(1 for s in states if s in COMING)
    wanted = target(model, state)
    if not (model.always_running or model.under_load):
        word = "not held"
    elif wanted == 0:
        word = "idle"
    elif ready >= wanted:
        word = "ready"
    elif ready + coming >= wanted:
        word = "starting"
    else:
        word = "short"
    return {
        "state": word,
        "state_means": STATES[word],
        "ready": ready,
        "target": wanted,
        "last_placement": None if record is None else {"at": record.at, "placed": record.placed},
    }


def _related(model: Model, name: str) -> Any:
    # A reverse one-to-one with no row raises rather than answering None.
    try:
        return getattr(model, name)
    except (HeldState.DoesNotExist, PlacementRecord.DoesNotExist):
        return None
