"""Holding and releasing domains, the budgets from server.yaml, and the
facility as one listing: every domain with its nodes, hold, cap and draw."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from llmgw import events, holdings
from llmgw.database import rows
from llmgw.database.atomic import atomic
from llmgw.facility import domains, power, readings
from llmgw.facility.models import DRAINED, Budget, Hold
from llmgw.inventory.models import Node
from llmgw.locations import LEVELS, TREE


class FacilityError(Exception):
    pass


def _members(key: str, nodes: Iterable[Node]) -> list[Node]:
    return [n for n in nodes if key in domains.keys_of(n.name, n.labels)]


@atomic
def hold(domain: str, reason: str, drain: bool, actor: str) -> Hold:
    try:
        key = domains.parse(domain)
    except domains.DomainError as exc:
        raise FacilityError(str(exc)) from None
    reason = (reason or "").strip()
    if not reason:
        raise FacilityError("reason: say why the domain is held (--reason)")
    if len(reason) > 500:
        raise FacilityError("reason: at most 500 characters")
    # A typo ("rack=r1" for "rack=r01") would hold nothing and say nothing.
    if not _members(key, Node.objects.only("name", "agent_labels", "operator_labels")):
        raise FacilityError(f"no node is in {domains.describe(key)}")
    held: Hold
    held, created = Hold.objects.select_for_update().get_or_create(
        domain=key, defaults={"reason": reason, "drain": drain, "held_by": actor}
    )
    if not created:
        held.reason, held.drain, held.held_by = reason, drain, actor
        held.save(update_fields=["reason", "drain", "held_by"])
    events.publish("hold_changed", domain=key, held=True)
    return held


@atomic
def release(domain: str) -> str:
    try:
        key = domains.parse(domain)
    except domains.DomainError as exc:
        raise FacilityError(str(exc)) from None
    deleted, _ = Hold.objects.filter(domain=key).delete()
    if not deleted:
        raise FacilityError(f"{domains.describe(key)} is not held")
    events.publish("hold_changed", domain=key, held=False)
    return key


def record_progress(hold: Hold, progress: str, moving: dict[str, Any] | None) -> None:
    """What draining the held domain has done and is moving now (serving
    drains; the hold is facility's row). It is said every reconciler tick,
    mostly the same again: only a change is told."""
    changed = (hold.progress, hold.moving) != (progress, moving)
    hold.progress, hold.progress_at, hold.moving = progress, timezone.now(), moving
    hold.save(update_fields=["progress", "progress_at", "moving"])
    if changed:
        events.publish("hold_changed", domain=hold.domain, held=True)


@atomic
def set_budgets(budgets: list[dict[str, Any]]) -> int:
    """Replace every cap with the file's (a cap left out of it is gone)."""
    Budget.objects.all().delete()
    Budget.objects.bulk_create(Budget(domain=b["domain"], watts=b["watts"]) for b in budgets)
    return len(budgets)


@dataclass
class NodeFacility:
    """What placement reads of the facility for one node."""

    held: str = ""
    budgets: tuple[tuple[str, float], ...] = ()
    derived_w: float | None = None
    measured_w: float | None = None
    gpu_limits: dict[int, float] = field(default_factory=dict)


class Facility:
    """Holds and budgets, read once per snapshot."""

    def __init__(self) -> None:
        # Composed once: the warm fleet reads the facility again with every
        # node it reads again, several times a second while it places.
        self.holds = {h.domain: h for h in rows.read(Hold)}
        self.budgets = dict(rows.values("budgets", _budgets, "id", None))

    def for_node(self, node: Node) -> NodeFacility:
        keys = domains.keys_of(node.name, node.labels)
        held = ""
        for key in keys:
            h = self.holds.get(key)
            if h is not None:
                drain = ", draining" if h.drain else ""
                held = f"{domains.describe(key)} ({h.reason}{drain})"
                break
        return NodeFacility(
            held=held,
            budgets=tuple((k, self.budgets[k]) for k in keys if k in self.budgets),
            derived_w=power.derived(node.gpu_telemetry),
            measured_w=power.measured(node.gpu_telemetry, node.sensors),
            gpu_limits=power.gpu_limits(node.gpu_telemetry),
        )


def _budgets() -> Any:
    return Budget.objects.values_list("domain", "watts")


def declared_by_node(only: Collection[int] | None = None) -> dict[int, float]:
    """Node pk -> watts its shards' profiles declare (profiles that say);
    every node's, or only these nodes' (by pk)."""
    # Shards are serving's rows: it answers (llmgw/holdings.py).
    return holdings.reader().declared_watts(only)


def overview() -> dict[str, Any]:
    """Every named domain, largest level first: its nodes, hold, cap and
    draw (declared, derived, measured summed over the nodes that know
    them, and the sum of each node's largest known figure)."""
    facility = Facility()
    declared = declared_by_node()
    rows: dict[str, dict[str, Any]] = {}
    above: dict[str, list[str]] = {}
    for n in readings.nodes():
        figures = (declared.get(n.pk), n.derived_w, n.measured_w)
        draw = power.largest(*figures)
        source = _source(figures, draw)
        # As domains.keys_of says them: largest first, the node itself last.
        keys = [f"{level}={v}" for level, v in zip(LEVELS, n.place, strict=True) if v]
        tree = [k for k in keys if k.partition("=")[0] in TREE]
        keys.append(n.name)
        for key in keys:
            named = "=" in key
            if not named and key not in facility.holds and key not in facility.budgets:
                continue
            row = rows.get(key)
            if row is None:
                row = rows[key] = _row(key, facility)
            row["nodes"].append(n.name)
            for name, value in zip(("declared_w", "derived_w", "measured_w"), figures, strict=True):
                if value is not None:
                    row[name] = (row[name] or 0.0) + value
            if draw is None:
                row["unknown_nodes"] += 1
            else:
                row["draw_w"] = (row["draw_w"] or 0.0) + draw
                row["draw_from"][source] += 1
            mine = _tree_above(key, tree)
            common = above.get(key)
            above[key] = mine if common is None else [k for k in common if k in mine]
    # Held or capped domains no node is in any longer still show.
    for key in set(facility.holds) | set(facility.budgets):
        rows.setdefault(key, _row(key, facility))
    order = {level: i for i, level in enumerate(LEVELS)}
    listed = sorted(rows.values(), key=lambda r: (order.get(r["level"], len(order)), r["value"]))
    # Sums of readings to a tenth of a watt, not 4261.400000000001.
    for row in listed:
        for name in ("declared_w", "derived_w", "measured_w", "draw_w"):
            if row[name] is not None:
                row[name] = round(row[name], 1)
        row["over_cap_w"] = over_cap(row["draw_w"], row["cap_w"])
        # The deepest site, room, row or rack holding every node of this
        # one (a PDU sits beside the tree, so under the rack that holds it
        # whole, if one does); None at the top, or when nodes disagree.
        common = above.get(row["domain"])
        row["parent"] = common[-1] if common else None
    return {"domains": listed, "levels": list(LEVELS)}


def _tree_above(key: str, tree: list[str]) -> list[str]:
    """The node's site, room, row and rack keys above this domain of it."""
    return tree[: tree.index(key)] if key in tree else tree


def _source(figures: tuple[float | None, float | None, float | None], draw: float | None) -> str:
    """Which figure a node's draw is, its largest; a tie goes to the reading."""
    declared, derived, measured = figures
    for name, value in (("measured", measured), ("derived", derived), ("declared", declared)):
        if value is not None and value == draw:
            return name
    return ""


def _row(key: str, facility: Facility) -> dict[str, Any]:
    level, sep, value = key.partition("=")
    h = facility.holds.get(key)
    return {
        "domain": key,
        "level": level if sep else "node",
        "value": value if sep else key,
        "nodes": [],
        "hold": hold_data(h) if h else None,
        "cap_w": facility.budgets.get(key),
        "declared_w": None,
        "derived_w": None,
        "measured_w": None,
        "draw_w": None,
        "unknown_nodes": 0,
        # How many nodes' draw is each figure: measured, derived (the
        # cards' limits) or declared (the profiles' estimate).
        "draw_from": {"measured": 0, "derived": 0, "declared": 0},
    }


def over_cap(draw_w: float | None, cap_w: float | None) -> float | None:
    """Watts past the cap (the draw placement holds against it, the largest
    known figure of each node summed); None when within it or either is
    unknown: a domain nobody measured is not said to be over."""
    if draw_w is None or cap_w is None or draw_w <= cap_w:
        return None
    return round(draw_w - cap_w, 1)


def hold_data(h: Hold) -> dict[str, Any]:
    return {
        "domain": h.domain,
        "reason": h.reason,
        "drain": h.drain,
        # A drain that has moved everything out is still a hold: nothing new
        # is placed there, but nothing is draining either.
        "drained": bool(h.drain and not h.moving and h.progress.startswith(DRAINED + ":")),
        "held_by": h.held_by,
        "held_at": h.held_at.isoformat(),
        "moving": h.moving,
        "progress": h.progress,
        "progress_at": h.progress_at.isoformat() if h.progress_at else None,
    }
