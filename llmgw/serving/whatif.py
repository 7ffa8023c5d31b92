"""What-if: the fleet as it stands, loaded once, and placement's answer to
"if this domain failed now" (placement.whatif), or "where would this model
go", in the data and the lines every surface prints. Stores nothing.

Held replicas are the live ones (not failed or lost: those are being
replaced already), with the claims their profiles declare, as the
snapshot counts them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from llmgw.catalog.loader import CatalogError, parse
from llmgw.catalog.models import Model
from llmgw.catalog.models import Profile as ProfileRow
from llmgw.catalog.services import _profile_fields
from llmgw.facility import domains
from llmgw.facility.domains import describe
from llmgw.placement import whatif
from llmgw.placement.explaining import decision_lines
from llmgw.placement.scheduler import Inventory, headroom
from llmgw.placement.services import decision_data, explanation_data
from llmgw.placement.snapshot import node_views, profile_view
from llmgw.placement.types import Decision, Profile, Shard, gib_bytes
from llmgw.placement.whatif import Fleet, HeldReplica, Outcome, WhatIfError
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Shard as ShardRow

__all__ = ["WhatIfError", "load", "fail", "sweep", "place"]


def held_replicas() -> list[HeldReplica]:
    rows = (
        ShardRow.objects.exclude(replica__state__in=(ReplicaState.FAILED, ReplicaState.LOST))
        .order_by("replica_id", "rank")
        .values_list(
            "replica_id",
            "replica__model__name",
            "replica__profile__name",
            "replica__profile__memory_gb",
            "replica__profile__cpu_cores",
            "replica__profile__power_w",
            "node__name",
            "gpu_indices",
        )
    )
    shards: dict[int, list[Shard]] = defaultdict(list)
    heads: dict[int, tuple[str, str]] = {}
    for rid, model, profile, memory_gb, cores, watts, node, gpus in rows:
        heads[rid] = (model, profile)
        shards[rid].append(
            Shard(
                node=node,
                gpu_indices=tuple(gpus or ()),
                gpu_uuids=(),
                adapters=(),
                cpu_cores=cores or 0,
                memory_bytes=gib_bytes(memory_gb or 0),
                holds_weights=False,
                # What the snapshot counts as declared (facility.services).
                power_w=watts,
            )
        )
    return [
        HeldReplica(rid, Decision(model, profile, tuple(shards[rid])))
        for rid, (model, profile) in heads.items()
    ]


def load() -> Fleet:
    """The fleet as placement sees it now, its live replicas and held counts."""
    models = list(Model.objects.prefetch_related("profiles").order_by("name"))
    return Fleet(
        views=node_views(),
        replicas=held_replicas(),
        profiles={m.name: [profile_view(p) for p in m.profiles.all()] for m in models},
        always_running={m.name: m.always_running for m in models},
    )


def _replica_words(r: HeldReplica) -> str:
    return f"{r.model} replica #{r.id} ({r.decision.profile} on {', '.join(r.decision.nodes)})"


def lost_data(item: whatif.Lost) -> dict[str, Any]:
    r = item.replica
    return {
        "replica": r.id,
        "model": r.model,
        "profile": r.decision.profile,
        "nodes": list(r.decision.nodes),
        "lost_on": list(item.on),
        "replaced": item.decision is not None,
        "decision": decision_data(item.decision) if item.decision else None,
        "explanation": explanation_data(item.placement) if item.placement else None,
    }


def lost_lines(item: whatif.Lost, entry: dict[str, Any]) -> list[str]:
    r = item.replica
    lines = [f"  lost: {_replica_words(r)}"]
    if item.decision is not None:
        where = decision_lines({"model": r.model, "decision": entry["decision"]})
        lines.append(f"    re-placed as {where[0].split(': placed as ', 1)[1]}")
        lines += [f"    {line.strip()}" for line in where[1:]]
    elif item.placement is not None:
        lines.append("    cannot be placed again:")
        lines += [f"      {line}" for line in entry["explanation"]["lines"][1:]]
    else:
        lines.append(f"    cannot be placed again: {r.model} was refused for an earlier replica")
    return lines


def short_now(fleet: Fleet) -> dict[str, tuple[int, int]]:
    """Held models below always_running before anything fails: model ->
    (replicas, wanted). Said apart, so no failure is blamed for them."""
    live = fleet.live()
    return {
        model: (live.get(model, 0), wanted)
        for model, wanted in sorted(fleet.always_running.items())
        if wanted and live.get(model, 0) < wanted
    }


def below_after(fleet: Fleet, outcome: Outcome) -> list[dict[str, Any]]:
    """The models this failure leaves below always_running with fewer
    replicas than they have now, each with its own replicas lost and not
    placed again (a model already short and untouched is not its doing)."""
    live = fleet.live()
    lost: dict[str, int] = defaultdict(int)
    stuck: dict[str, int] = defaultdict(int)
    for item in outcome.lost:
        lost[item.replica.model] += 1
        stuck[item.replica.model] += item.decision is None
    return [
        {
            "model": m,
            "replicas": after,
            "always_running": wanted,
            "lost": lost[m],
            "not_replaced": stuck[m],
        }
        for m, (after, wanted) in outcome.below(fleet).items()
        if after < live.get(m, 0)
    ]


def short_data(short: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    return [{"model": m, "replicas": n, "always_running": w} for m, (n, w) in short.items()]


def short_lines(short: dict[str, tuple[int, int]], indent: str = "  ") -> list[str]:
    return [
        f"{indent}{m} is already at {n} of {w} always-running replicas, before any failure"
        for m, (n, w) in short.items()
    ]


def outcome_data(fleet: Fleet, outcome: Outcome) -> dict[str, Any]:
    count = f"{len(outcome.nodes)} node" + ("" if len(outcome.nodes) == 1 else "s")
    lines = [f"if {outcome.domain} failed ({count}: {', '.join(outcome.nodes)}):"]
    # The verdict first: the detail below it runs to a line per node refused.
    short = short_now(fleet)
    below = {b["model"]: (b["replicas"], b["always_running"]) for b in below_after(fleet, outcome)}
    lines += short_lines(short)
    if not outcome.lost:
        lines.append("  no held replica has a shard there: nothing is lost")
    for model, (after, wanted) in below.items():
        lines.append(f"  {model} would be left with {after} of {wanted} always-running replicas")
    if outcome.lost and not below:
        lines.append(
            "  no held model is left with fewer replicas than it has now"
            if short
            else "  every held model keeps its always-running replicas"
        )
    lost = []
    for item in outcome.lost:
        entry = lost_data(item)
        lost.append(entry)
        lines += lost_lines(item, entry)
    power = whatif.power_after(fleet, outcome)
    lines += power_lines(power)
    return {
        "domain": outcome.domain,
        "nodes": outcome.nodes,
        "power": [
            {
                "domain": row.domain,
                "cap_w": row.cap_w,
                "before_w": row.before_w,
                "after_w": row.after_w,
                "headroom_w": row.headroom_w,
                "unknown_nodes": row.unknown,
            }
            for row in power
        ],
        "lost": lost,
        "replaced": sum(1 for e in lost if e["replaced"]),
        "not_replaced": sum(1 for e in lost if not e["replaced"]),
        "below": [
            {"model": m, "replicas": after, "always_running": wanted}
            for m, (after, wanted) in below.items()
        ],
        "already_short": short_data(short),
        "lines": lines,
    }


def power_lines(rows: list[whatif.PowerRow]) -> list[str]:
    if not rows:
        return ["  power: no domain has a cap (budgets: in server.yaml)"]
    out = ["  power afterwards, per capped domain:"]
    for r in rows:
        unknown = f", draw unknown on {plural(r.unknown, 'node')}" if r.unknown else ""
        if r.after_w is None:
            out.append(f"    {describe(r.domain)}: draw unknown, cap {kw(r.cap_w)}{unknown}")
            continue
        was = f" (was {kw(r.before_w)})" if r.before_w != r.after_w else ""
        room = r.cap_w - r.after_w
        # Past the cap already (the cards' limits may add up past it) is said so.
        left = f"{kw(room)} headroom" if room >= 0 else f"{kw(-room)} over it"
        out.append(
            f"    {describe(r.domain)}: {kw(r.after_w)}{was} of its {kw(r.cap_w)} cap, "
            f"{left}{unknown}"
        )
    return out


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def kw(watts: float | None) -> str:
    return "-" if watts is None else f"{watts / 1000:.1f} kW"


def fail(domain: str) -> dict[str, Any]:
    try:
        key = domains.parse(domain)
    except domains.DomainError as exc:
        raise WhatIfError(str(exc)) from None
    fleet = load()
    return outcome_data(fleet, whatif.fail(fleet, key))


def sweep(levels: tuple[str, ...] = whatif.SWEPT) -> dict[str, Any]:
    fleet = load()
    tried, outcomes = whatif.sweep(fleet, levels)
    # The sweep returns every failure that leaves a model short, those
    # already short included; only a failure that takes replicas from a
    # model short afterwards hurts.
    rows: list[dict[str, Any]] = []
    for o in outcomes:
        below = below_after(fleet, o)
        if below:
            rows.append(
                {
                    "domain": o.domain,
                    "nodes": len(o.nodes),
                    "lost": len(o.lost),
                    "not_replaced": sum(1 for lost in o.lost if lost.decision is None),
                    "below": below,
                }
            )
    short = short_now(fleet)
    lines = [f"failed {tried} domains ({', '.join(levels)}) one at a time: {len(rows)} would hurt"]
    lines += short_lines(short)
    for row in rows:
        models = ", ".join(
            f"{b['model']} {b['replicas']}/{b['always_running']}" for b in row["below"]
        )
        lines.append(
            f"  {row['domain']}: {plural(row['lost'], 'replica')} lost, {row['not_replaced']} "
            f"cannot be placed again; below always_running: {models}"
        )
    if not tried:
        labels = ", ".join(f"llmgw.io/{level}" for level in levels)
        lines.append(f"  no node names a domain of these levels (labels {labels})")
    elif not rows and short:
        lines.append("  no one failing leaves a held model with fewer replicas than it has now")
    elif not rows:
        lines.append("  every held model keeps its always-running replicas, whichever one fails")
    return {
        "levels": list(levels),
        "tried": tried,
        "hurt": rows,
        "already_short": short_data(short),
        "lines": lines,
    }


def profiles_of(spec: dict[str, Any]) -> list[Profile]:
    """A parsed catalog model's profiles as placement reads them, through
    the catalog's own defaults and the stored row's fields."""
    out = []
    for p in spec["profiles"]:
        row = ProfileRow(name=p["name"], **_profile_fields(p))
        out.append(profile_view(row))
    return out


def place(text: str) -> dict[str, Any]:
    """Where a model (or new profiles of one) not in the catalog yet would go:
    its always_running replicas (one at least) placed one by one on a copy
    of the fleet, and how many more of each profile would fit after them.

    The text is a catalog file (`models:`), refused as `llmgw catalog
    apply` would refuse it, naming the line and key."""
    from llmgw.catalog.services import check

    parsed = parse(text)
    if not parsed.models:
        raise CatalogError(["file: no models: to place"])
    # A new profile of a model already running is placed beside its replicas;
    # the file need not list the profiles they run with, as applying it would.
    errors = [e for e in check(parsed) if " is gone from the file but " not in e]
    if errors:
        raise CatalogError(errors)
    inv = Inventory(node_views())
    answers, lines = [], []
    for spec in parsed.models:
        model, profiles = spec["name"], profiles_of(spec)
        wanted = max(spec.get("always_running", 0), 1)
        placed: list[dict[str, Any]] = []
        refusal = None
        for _ in range(wanted):
            decision, _ = inv.first_fit(model, profiles)
            if decision is None:
                refusal = explanation_data(inv.place(model, profiles))
                break
            inv.apply(decision)
            placed.append(decision_data(decision))
        room = headroom(model, profiles, inv)
        lines.append(f"{model}: {len(placed)} of {wanted} replicas would be placed")
        for i, d in enumerate(placed, 1):
            shown = decision_lines({"model": f"  replica {i}", "decision": d})
            lines += shown
        if refusal is not None:
            lines.append(f"  replica {len(placed) + 1} cannot be placed:")
            lines += [f"    {line}" for line in refusal["lines"][1:]]
        lines += [f"  then {n} more would fit as profile {p}" for p, n in room.items()]
        answers.append(
            {
                "model": model,
                "wanted": wanted,
                "placed": placed,
                "refusal": refusal,
                "headroom": room,
            }
        )
    return {"models": answers, "lines": lines}
