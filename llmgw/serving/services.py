"""Held counts, and the catalog changes that move what nodes run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import transaction

from llmgw.catalog import loader
from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.facility import services as facility
from llmgw.placement import services as placement
from llmgw.placement.services import PlacementError
from llmgw.placement.types import Placement
from llmgw.serving import desired, placing, turns, warm
from llmgw.serving.models import Replica


class CountRefused(Exception):
    def __init__(self, message: str, explanation: dict[str, Any]) -> None:
        super().__init__(message)
        self.explanation = explanation


def set_counts(name: str, always_running: int | None, under_load: int | None) -> Model:
    """Change a model's held counts. An always_running that placement cannot
    meet is refused with placement's own reasons, and nothing changes."""
    with transaction.atomic():
        try:
            model: Model = (
                Model.objects.select_for_update().prefetch_related("profiles").get(name=name)
            )
        except Model.DoesNotExist:
            raise PlacementError(f"no model named {name!r} in the catalog") from None
        target_always = model.always_running if always_running is None else always_running
        target_load = model.under_load if under_load is None else under_load
        if target_load and target_load < target_always:
            raise CountRefused(
                f"under_load {target_load} is below always_running {target_always}; "
                "under_load is the most replicas to run while loaded",
                {},
            )
        missing = target_always - model.replicas.count()
        if missing > 0:
            fits, explanation = placement.room_for(model, missing)
            if fits < missing:
                raise CountRefused(
                    f"always_running {target_always} cannot be met: {model.replicas.count()} running, "
                    f"room for {fits} more, {missing} needed",
                    explanation or {},
                )
        catalog.set_held(model, target_always, target_load)
        return model


def place_by_hand(name: str) -> tuple[Replica | None, Placement, dict[str, Any]]:
    """`llmgw ctl place`: one more replica now, and held.

    The reconciler takes back whatever runs beyond the held count, so a
    replica placed outside it would be released on the next tick, a silent
    undo of what the operator asked for. The replica counts toward
    always_running instead: raised to the replicas that now run when it is
    below them, in the same transaction as the placement, so no tick sees
    the replica without the count that holds it."""
    outcome: tuple[Replica | None, Placement, dict[str, Any]] = _TURNS.place(name)
    return outcome


def _place_many(names: list[str]) -> list[tuple[Replica | None, Placement, dict[str, Any]]]:
    # Outside any transaction: a cold warm fleet (a new process) is read
    # whole here, not under the locks every other placer waits on.
    warm.FLEET.look()
    outcomes = placing.place_held(names)
    return [_answer(n, *outcome) for n, outcome in zip(names, outcomes, strict=True)]


_TURNS = turns.Turns(_place_many)


def _answer(
    name: str, replica: Replica | None, result: Placement, held: placing.Held
) -> tuple[Replica | None, Placement, dict[str, Any]]:
    before, after = held
    counts: dict[str, Any] = {"before": before, "after": after, "held": ""}
    if replica is None:
        return None, result, counts
    if after == before:
        return replica, result, {**counts, "held": f"held as one of always_running {before}"}
    words = (
        f"always_running raised from {before} to {after} so the reconciler keeps "
        f"this replica; lower it with llmgw ctl model scale {name} --always-running N"
    )
    return replica, result, {**counts, "held": words}


def apply_catalog(path: Path) -> dict[str, Any]:
    """`llmgw catalog FILE`: apply the file, and when it names engines tell
    every node, which converges on the engines the catalog names. The
    catalog knows nothing of nodes; this is where the two meet."""
    with transaction.atomic():
        counts = catalog.apply_file(path)
        # The file was read and checked whole above, budgets included; the
        # catalog does not know the facility, so its caps are stored here.
        budgets = loader.parse(path.read_text()).budgets
        if budgets is not None:
            counts["budgets"] = facility.set_budgets(budgets)
        if counts["engines"]:
            transaction.on_commit(desired.rebuild)
    return counts
