"""Storing placement's decisions: the replica, its shards and GPU claims,
the record explain reads, and the nodes' desired state, in one
transaction.

Two workers placing at once must never hand out one GPU, gigabyte or core
twice. On PostgreSQL a transaction-scoped advisory lock serialises
placement (decisions take milliseconds, so one at a time costs nothing),
and the unique (node, index) constraint on GPU claims refuses a double
hand-out even if a path ever bypasses the lock. The decision is asked for
under the lock, so it is made on the claims every earlier placement
committed.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from llmgw import events
from llmgw.catalog.models import Model, Profile
from llmgw.database import prepared
from llmgw.inventory.models import Node
from llmgw.placement import claims
from llmgw.placement import services as placement
from llmgw.placement.explaining import lines
from llmgw.placement.scheduler import Inventory
from llmgw.placement.snapshot import kept_view, profile_view
from llmgw.placement.types import Decision, Explanation, Placement, Rejection
from llmgw.serving import checked, desired, storing, warm
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import PlacementRecord, Replica, Shard

_LOCK_KEY = 0x6C6C6D67  # "llmg"


def place_replica(model_name: str) -> tuple[Replica | None, Placement]:
    """Place one more replica of the model, or record why it cannot be.

    Decided on this process's warm fleet, checked against the database
    under the lock (warm.py); the explanation is judged when read, not
    here: at 5,000 nodes it cost as much as the rest of a placement."""
    replica, result, _ = _place([model_name], hold=False)[0]
    return replica, result


def place_held(names: list[str]) -> list[tuple[Replica | None, Placement, Held]]:
    """Place one more replica of each model named (a model named twice gets
    two), in this order and one transaction, and hold them: always_running
    rises to the replicas that then run, so no tick of the reconciler sees
    a replica without the count that keeps it.

    The model's row is locked in the statement that takes placement's lock
    and the count is raised in the statement that stores the replica: a
    lock, a count and an update of their own were five of the thirteen
    round trips of a placement by hand, every one of them a wait for every
    other placer while 5,000 nodes beat on the same cores. Several in one
    transaction share its lock, look, nodes' desired state and commit
    (serving.services batches the calls that wait for each other)."""
    return _place(names, hold=True)


class Held(NamedTuple):
    """always_running before and after a held placement."""

    before: int
    after: int


# A decision found changed under it is made again this many times at most.
ATTEMPTS = 3


def _place(names: list[str], hold: bool) -> list[tuple[Replica | None, Placement, Held]]:
    """Decided on the warm index, checked by the database before commit
    (checked.py): a decision made on a node that changed since the look is
    made again, on the node read again, a few times at most.

    The index changes only with what commits. Placing on its own (no
    caller's transaction around it), the process's lock is held through
    the commit, and the decisions stay in the index; inside a caller's
    transaction they are taken out again when this returns, and the log
    reads their nodes once the caller commits; a failure takes them out
    either way.

    The connection before the process's lock: a thread holding the lock
    while it waits for a pooled connection would keep every thread that
    holds one waiting for the lock, until the pool's timeout failed them
    all."""
    why: list[str] = []
    for _ in range(ATTEMPTS):
        try:
            return _place_once(names, hold)
        except checked.Changed as changed:
            why = changed.why
    raise placement.PlacementError(
        f"the fleet kept changing under placement ({ATTEMPTS} decisions made again): "
        + "; ".join(why)
    )


def _place_once(names: list[str], hold: bool) -> list[tuple[Replica | None, Placement, Held]]:
    fleet = warm.FLEET
    alone = not connection.in_atomic_block
    connection.ensure_connection()
    applied: list[Decision] = []
    with fleet.lock:
        try:
            with transaction.atomic():
                # The catalog, and the locks taken in the same statement (_catalog).
                catalogs = {name: _catalog(name, hold) for name in dict.fromkeys(names)}
                counts = {name: model.always_running for name, (model, _) in catalogs.items()}
                # Our transaction's id, assigned by the look, names the log rows
                # these placements write: the warm fleet skips them once committed.
                inventory = fleet.current(writing=True)
                # The caller's transaction changed nodes itself: its
                # decisions are made on the fleet as it sees it, alone.
                shared = not (fleet.own or fleet.own_whole)
                if not shared:
                    inventory = fleet.private()
                xmax, xip, xid = fleet.xmax, list(fleet.xip), fleet.own_xid
                out: list[tuple[Replica | None, Placement, Held]] = []
                wants: dict[int, checked.Want] = {}
                for name in names:
                    model, stored = catalogs[name]
                    replica, result, held, pks = _place_one(model, stored, inventory, hold)
                    if result.decision is not None:
                        if shared:
                            applied.append(result.decision)
                        _claims(wants, pks, result.decision, stored)
                    held = held or Held(counts[name], counts[name])
                    counts[name] = held.after
                    out.append((replica, result, held))
                if wants:
                    desired.rebuild(list(wants))
                    named = {pk: fleet.views[pk].name for pk in wants if pk in fleet.views}
                    checked.check(
                        wants, named, xmax, xip, warm.WarmFleet._deadline, fleet.in_domains
                    )
        except BaseException as failed:
            fleet.restore(applied)
            if isinstance(failed, checked.Changed):
                fleet.read_again(failed.nodes)
            raise
        if alone:
            fleet.committed(applied, xid)
        else:
            fleet.restore(applied)
    return out


def _claims(
    wants: dict[int, checked.Want], pks: list[int], decision: Decision, stored: list[Profile]
) -> None:
    """Add what the decision's shards claim on their nodes (pks, in the
    shards' order) to `wants`, for the database's check."""
    declares = next(p.power_w is not None for p in stored if p.name == decision.profile)
    for pk, shard in zip(pks, decision.shards, strict=True):
        watts = shard.power_w or 0.0
        wants[pk] = wants.get(pk, checked.Want()).plus(
            shard.memory_bytes, shard.cpu_cores, watts, 0.0 if declares else watts
        )


def _place_one(
    model: Model, stored: list[Profile], inventory: Inventory, hold: bool
) -> tuple[Replica | None, Placement, Held | None, list[int]]:
    """One decision, stored and applied to `inventory`: the replica, what
    became of always_running (with `hold`), the nodes it claims on."""
    profiles = [kept_view(p) for p in stored]
    decision, attempts = placement.decide_on(inventory, model.name, profiles)
    data = placement.record_data(model.name, decision, attempts)
    result = Placement(
        model.name,
        decision,
        Explanation(model.name, attempts, [partial(_judge_now, model.name, data)]),
    )
    if decision is None:
        _record(model, None, data)
        return None, result, None, []
    try:
        replica, held, nodes = _store(model, stored, decision, data, hold)
    except IntegrityError as refused:
        # The unique claim, the backstop for cards: one was claimed since
        # the look (the transaction is rolled back by the caller's atomic).
        if "one_claim_per_gpu" not in str(refused):
            raise
        known = warm.FLEET.pk_by_name
        raise checked.Changed(
            {known[n] for n in decision.nodes if n in known},
            [f"a card placement chose on {', '.join(decision.nodes)} was claimed since it looked"],
        ) from refused
    # Only once its rows are stored: the caller counts it among the
    # decisions to take out of the index if the transaction then fails.
    inventory.apply(decision)
    return replica, result, held, nodes


def _catalog(model_name: str, hold: bool = False) -> tuple[Model, list[Profile]]:
    """The model and its profiles in one plain query: the ORM compiling a
    select_related one cost a millisecond of CPU on every placement. The
    same statement takes placement's lock: a round trip of
    its own was a tenth of a placement. `hold`: and the model's row lock."""
    rows = _rows(HOLDING_CATALOG if hold else LOCKING_CATALOG, [_LOCK_KEY, model_name])
    if not rows:
        raise placement.PlacementError(f"no model named {model_name!r} in the catalog")
    kept = _BUILT.get(model_name)
    if kept is not None and kept[0] == rows:
        return kept[1], kept[2]
    model_width = len(Model._meta.concrete_fields)
    model = _instance(Model, rows[0][:model_width])
    profiles = []
    for row in rows:
        if row[model_width] is not None:
            profile = _instance(Profile, row[model_width:])
            profile.model = model
            profiles.append(profile)
    _BUILT[model_name] = (rows, model, profiles)
    return model, profiles


# Each model's catalog rows as last read and the instances built from them:
# rows read again that are the same are not converted again (0.3-0.5 ms
# of the 3 ms of CPU a placement took). Read every time, so never
# stale; placement only reads the instances, so threads may share them.
_BUILT: dict[str, tuple[list[tuple[Any, ...]], Model, list[Profile]]] = {}


def _columns(model: type[Any], table: str) -> str:
    return ", ".join(
        f"{table}.{connection.ops.quote_name(f.column)}" for f in model._meta.concrete_fields
    )


def _catalog_sql(locking: bool, hold: bool = False) -> str:
    """The model and its profiles in their models' ordering (highest
    priority first, then by name); a model without profiles still comes
    back, its profile columns null.

    `locking`: the same statement takes placement's lock. The catalog is
    then read as before the lock is granted (the statement's snapshot is
    taken when it starts): only claims need reading after it, and the warm
    fleet's look does that in the next statement. No rows (an unknown
    model) may leave the lock untaken; that placement fails and rolls back.

    `hold`: the model's row is locked too, after placement's lock (the row
    is locked as the join emits it), which is the order every placer takes
    them in. NO KEY UPDATE: the replica inserted next references the row,
    which a plain FOR UPDATE would make it wait on; set_counts and
    take_back, which lock the row alone, still wait for the placement.

    The same statement has the rest of the transaction run its prepared
    statements on their generic plans: the look and the check read the
    log by transaction id (`xid >= $1`), which the planner cannot size
    without the value, so it planned them afresh at every placement (a
    quarter of a millisecond each, under the lock every placer waits for).
    And without JIT compilation: the power check's sum is estimated
    costly enough to compile, which took a second every time while the
    sum itself takes a millisecond."""
    lock = (
        "WITH granted AS MATERIALIZED (SELECT pg_advisory_xact_lock(%s::bigint), "
        "set_config('plan_cache_mode', 'force_generic_plan', true), "
        "set_config('jit', 'off', true))"
    )
    return f"""
{lock if locking else ""}
SELECT {_columns(Model, "m")}, {_columns(Profile, "p")}
FROM {"granted, " if locking else ""}catalog_model m
LEFT JOIN catalog_profile p ON p.model_id = m.id
WHERE m.name = %s
ORDER BY p.priority DESC, p.name
{"FOR NO KEY UPDATE OF m" if hold else ""}
"""


LOCKING_CATALOG = _catalog_sql(locking=True)
HOLDING_CATALOG = _catalog_sql(locking=True, hold=True)


def _rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows


def _instance(model: type[Any], values: tuple[Any, ...]) -> Any:
    """A model instance from its columns' raw values, converted as the
    ORM's own queries convert them (JSON text)."""
    fields = model._meta.concrete_fields
    converted = []
    for field, value in zip(fields, values, strict=True):
        col = field.get_col(model._meta.db_table)
        for convert in connection.ops.get_db_converters(col) + field.get_db_converters(connection):
            value = convert(value, col, connection)
        converted.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], converted)


def _store(
    model: Model, stored: list[Profile], decision: Decision, data: dict[str, Any], hold: bool
) -> tuple[Replica, Held | None, list[int]]:
    """The decision's rows: the replica, always_running before and after
    it is raised to the replicas that now run (with `hold`), and the node
    of each shard, in the shards' order (the caller rebuilds their desired
    state and checks them)."""
    profiles = {p.name: p for p in stored}
    replica = Replica(
        model=model,
        profile=profiles[decision.profile],
        fabric=decision.fabric or "",
        env=dict(decision.env),
        explanation=data,
    )
    # The warm fleet knows each node's key; a node it does not is looked up.
    known = warm.FLEET.pk_by_name
    nodes = {n: known[n] for n in decision.nodes if n in known}
    if len(nodes) < len(decision.nodes):
        nodes = dict(Node.objects.filter(name__in=decision.nodes).values_list("name", "pk"))
    shards = [
        Shard(
            replica=replica,
            node_id=nodes[s.node],
            rank=rank,
            gpu_indices=list(s.gpu_indices),
            adapters=list(s.adapters),
        )
        for rank, s in enumerate(decision.shards)
    ]
    pks = [nodes[s.node] for s in decision.shards]
    record = PlacementRecord(model=model, placed=True, explanation=data)
    counts = storing.store(replica, shards, record, hold)
    events.publish(
        "replica_placed", model=model.name, replica=replica.pk, nodes=sorted(set(decision.nodes))
    )
    return replica, Held(*counts) if counts else None, pks


def _judge_now(model_name: str, data: dict[str, Any]) -> tuple[Rejection, ...]:
    """A fresh placement's rejections, judged when first read (the place
    API's answer): the fleet now, the decision's own claims taken out."""
    return judge(model_name, data, data["placed"]).explanation.rejections


def judge(model_name: str, data: dict[str, Any], holds_claims: bool) -> Placement:
    """A stored decision judged node by node on the fleet now. `holds_claims`:
    the decision's replica still holds its claims, which are taken out so
    that its own nodes read as they did when it was decided."""
    model = placement.load_model(model_name)
    profiles = [profile_view(p) for p in model.profiles.all()]
    decision = placement.stored_decision(model_name, data["decision"]) if data["decision"] else None
    attempts = tuple((a["profile"], a["priority"], a["placed"]) for a in data["attempts"])
    with warm.FLEET.lock:
        inventory = warm.FLEET.exact()
        if decision is not None and holds_claims:
            # A copy that shares every node but the decision's own.
            inventory = inventory.replaced(
                claims.without(warm.FLEET.views_of(decision.nodes), decision)
            )
        judged = placement.judged(model_name, profiles, decision, attempts, inventory)
        # Judged now, while the warm index is the fleet it describes.
        judged.explanation.materialize()
    return judged


def _record(model: Model, replica: Replica | None, data: dict[str, Any]) -> None:
    # One UPDATE where the model has a record (all but its first placement)
    # rather than update_or_create's savepoint, read and write: under the
    # placement lock every round trip is every placer's wait.
    fields = {
        "placed": replica is not None,
        "placed_replica": replica.pk if replica else None,
        "explanation": data,
    }
    if not PlacementRecord.objects.filter(model=model).update(at=timezone.now(), **fields):
        PlacementRecord.objects.create(model=model, **fields)


def release_replica(replica_id: int) -> None:
    """Release a replica whole: its shards and every claim they hold, and
    tell its nodes (their desired state drops the shards, so agents stop
    them), in one transaction."""
    with transaction.atomic():
        rows = list(
            Shard.objects.filter(replica_id=replica_id).values_list(
                "node_id", "node__name", "replica__model__name"
            )
        )
        Replica.objects.filter(pk=replica_id).delete()
        desired.rebuild([node for node, _, _ in rows])
        if rows:
            names = sorted({name for _, name, _ in rows})
            events.publish("replica_released", model=rows[0][2], replica=replica_id, nodes=names)


def explain(model_name: str) -> dict[str, Any]:
    """The last placement attempt as recorded, with when it was made and
    what became of the replica it placed; if there has been none, a dry run
    now, marked as such.

    A record outlives what it describes: the replica it placed may since
    have failed or been released, and its nodes lost their cables. Shown
    bare, it reads as a placement that holds today."""
    now = timezone.now()
    record = PlacementRecord.objects.filter(model__name=model_name).first()
    if record is None:
        data = {
            **placement.explanation_data(dry_run(model_name)),
            **_when(now, now),
            "recorded_at": None,
            "dry_run": True,
            "placed_replica": None,
        }
        heading = [f"{data['model']}: never placed; this is what placement would decide now"]
        return {**data, "lines": heading + lines(data)}
    state = None
    if record.placed_replica is not None:
        state = (
            Replica.objects.filter(pk=record.placed_replica).values_list("state", flat=True).first()
        )
    stored = record.explanation
    if stored.get("judged_on_read"):
        # Its nodes judged now: the decision's own claims taken out while
        # its replica holds them, so they read as when it was decided.
        judged = judge(model_name, stored, state is not None)
        stored = {**placement.explanation_data(judged), "judged_now": True}
    data = {
        **stored,
        **_when(record.at, now),
        "recorded_at": record.at.isoformat(),
        "dry_run": False,
        # None: the attempt placed nothing, or was recorded before records
        # named their replica (unknown, not "released").
        "placed_replica": None,
    }
    heading = [f"made {data['made_at']} ({_ago(data['age_s'])} ago)"]
    if record.placed_replica is not None:
        data["placed_replica"] = {
            "id": record.placed_replica,
            "state": state,
            "released": state is None,
        }
        fate = _fate(record.placed_replica, state)
        if fate:
            data["text"] = f"{fate}\n{data['text']}"
            heading.append(fate)
    # Rendered again from the data: a record stored before explanations
    # carried their lines reads like any other.
    return {**data, "lines": heading + lines(data)}


def dry_run(model_name: str) -> Placement:
    """What placement would decide now, on the warm fleet, every node judged."""
    model = placement.load_model(model_name)
    profiles = [profile_view(p) for p in model.profiles.all()]
    with warm.FLEET.lock:
        inventory = warm.FLEET.exact()
        decision, attempts = placement.decide_on(inventory, model.name, profiles)
        judged = placement.judged(model.name, profiles, decision, attempts, inventory)
        judged.explanation.materialize()
    return judged


def _when(made: datetime, now: datetime) -> dict[str, Any]:
    return {"made_at": made.isoformat(), "age_s": round((now - made).total_seconds(), 1)}


def _ago(seconds: float) -> str:
    whole = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def _fate(replica_id: int, state: str | None) -> str:
    """A line for a recorded placement whose replica no longer serves."""
    if state is None:
        return (
            f"replica #{replica_id}, placed by this attempt, has been released: "
            "what follows is the decision as made then, not where the model runs now"
        )
    if state == ReplicaState.FAILED:
        return (
            f"replica #{replica_id}, placed by this attempt, has failed: "
            "the reconciler releases it and places a replacement"
        )
    return ""
