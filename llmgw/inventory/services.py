"""State changes to the inventory. Views and commands call these; each is one
transaction, and nothing else writes these tables."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from llmgw import events
from llmgw.fabrics import services as fabric_services
from llmgw.inventory import commands, credentials, gpus
from llmgw.inventory.choices import NodeState
from llmgw.inventory.models import AuditEvent, Filesystem, ModelHolding, Node, StalenessPass
from llmgw.serving import desired as desired_state
from llmgw.serving import reports as shard_reports

log = logging.getLogger("llmgw.inventory")


class InventoryError(Exception):
    """A refused operation, with a message fit for the operator."""


def _audit(node_name: str, actor: str, action: str, detail: str = "") -> None:
    AuditEvent.objects.create(node_name=node_name, actor=actor, action=action, detail=detail)


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# --- identity ---------------------------------------------------------------


# The names an agent can report as: its payloads' `node` is checked against
# this (api/agent_serializers.NAME), and the console and the API put the name
# in their URLs. A node added under another name could never join.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


@transaction.atomic
def add_node(name: str, actor: str) -> str:
    """Create (or re-open) a node and return its one-time join token."""
    if not NODE_NAME.fullmatch(name):
        raise InventoryError(
            f"node name {name!r} is refused: an agent reports as letters, digits, '.', '_' "
            f"and '-', starting with a letter or a digit, 253 characters at most"
            + (f" (this one has {len(name)})" if len(name) > 253 else "")
        )
    node, _ = Node.objects.select_for_update().get_or_create(name=name)
    if node.credential_hash and not node.revoked_at:
        raise InventoryError(f"node {name} has already joined; revoke it first to re-join")
    token = credentials.new_secret()
    node.join_token_hash = credentials.digest(token)
    node.join_token_expires_at = timezone.now() + timedelta(seconds=settings.JOIN_TOKEN_TTL_S)
    node.revoked_at = None
    node.save()
    _audit(name, actor, "node-add")
    return token


def join(name: str, token: str) -> str:
    """Trade a join token for the node's own credential, exactly once."""
    now = timezone.now()
    credential, cred_digest = credentials.make_credential(name)
    with transaction.atomic():
        # Compare-and-set on the token digest: two agents racing with one
        # token cannot both win.
        won = Node.objects.filter(
            name=name,
            join_token_hash=credentials.digest(token),
            join_token_expires_at__gt=now,
        ).update(join_token_hash="", join_token_expires_at=None, credential_hash=cred_digest)
        if won == 1:
            _audit(name, "agent", "join")
    if won != 1:
        # Outside the block above: a refusal raised inside it would roll its
        # own audit row back, and a token being guessed is worth a record.
        _audit(name, "agent", "join-refused", "unknown node, used or expired token")
        raise InventoryError("join refused: unknown node, or the token was used or has expired")
    return credential


@transaction.atomic
def revoke_node(name: str, actor: str) -> None:
    node = _locked(name)
    Node.objects.filter(pk=node.pk).update(
        credential_hash="", join_token_hash="", revoked_at=timezone.now(), state=NodeState.NOT_READY
    )
    _audit(name, actor, "node-revoke")
    # Its open command streams are closed now, not at their next poll.
    transaction.on_commit(lambda: commands.close_streams(node.pk, node.credential_hash))


def authenticate(credential: str) -> Node | None:
    parts = credentials.split_credential(credential)
    if parts is None:
        return None
    name, secret = parts
    node = Node.objects.filter(name=name).first()
    if node is None or node.revoked_at or not credentials.matches(secret, node.credential_hash):
        return None
    return node


def refuse_impersonation(node: Node, claimed: object, path: str) -> None:
    log.warning("node %s sent a payload for node %r to %s: refused", node.name, claimed, path)
    _audit(node.name, node.name, "impersonation-refused", f"payload named {claimed!r} on {path}")


# --- agent reports ----------------------------------------------------------

_AGENT_OWNED = (
    "agent_version",
    "probed",
    "simulated",
    "heartbeat_interval_s",
)
_SYSTEM_FIELDS = ("os", "kernel", "arch", "cpu_model", "nvidia_driver")


@transaction.atomic
def register(node: Node, data: dict[str, Any], address: str | None) -> Node:
    """Store what the agent says the node is, and `address`, where the
    registration came from (None: not an IP address, so unknown). Cordons and
    operator labels are the operator's and are never touched here."""
    system = data.get("system") or {}
    node = Node.objects.select_for_update().get(pk=node.pk)
    node.address = address
    for field in _AGENT_OWNED:
        if field in data:
            setattr(node, field, data[field])
    for field in _SYSTEM_FIELDS:
        setattr(node, field, system.get(field) or "")
    node.cpus = system.get("cpus")
    node.memory_total_bytes = system.get("memory_total_bytes")
    node.cpu_flags = list(system.get("cpu_flags") or [])
    node.features = list(data.get("features") or [])
    node.agent_labels = dict(data.get("labels") or {})
    node.fabrics = list(data.get("fabrics") or [])
    node.registered_at = timezone.now()
    node.gpu_topology = data.get("gpu_topology")
    if "imex" in data:
        node.imex = data["imex"]
    node.save()
    gpus.register(node, data.get("gpus") or [])
    # A node that joins after the catalog named its engines hears of them
    # here; otherwise it would wait for a placement that refuses it for
    # having none.
    desired_state.rebuild([node.pk])
    return node


def heartbeat(node: Node, data: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """Store one heartbeat from a node already authenticated."""
    answer = _heartbeat(data, now, {"id": node.pk})
    if answer is None:  # the row went away under us: nothing to store
        return {"node": node.name, "state": NodeState.READY, "register": node.registered_at is None}
    return answer


def heartbeat_with_credential(
    name: str, secret: str, data: dict[str, Any], now: datetime | None = None
) -> dict[str, Any] | None:
    """Authenticate and store one heartbeat in a single statement; None,
    having written nothing, when the credential is unknown or revoked.

    The credential check is the UPDATE's WHERE clause rather than a SELECT
    before it: one round trip instead of two, and a revocation bites on the
    very next heartbeat (there is no cache of credentials to go stale)."""
    return _heartbeat(
        data, now, {"name": name, "credential_hash": credentials.digest(secret), "revoked_at": None}
    )


def _heartbeat(
    data: dict[str, Any], now: datetime | None, where: dict[str, Any]
) -> dict[str, Any] | None:
    """A heartbeat that changes nothing but the measurements is a single
    UPDATE of the node row: at 10,000 nodes every 10 s this is the hot path
    of the whole control plane. Changed filesystems or weights, and a node
    coming back to Ready, are stored durably in a transaction of their own."""
    now = now or timezone.now()
    fields: dict[str, Any] = {"last_heartbeat_at": now}
    if "collectors" in data:
        fields["collectors"] = data["collectors"]
    cpu = data.get("cpu")
    if cpu is not None:
        fields["cpu_utilization_percent"] = cpu.get("utilization_percent")
        load = cpu.get("load") or [None, None, None]
        fields["load1"], fields["load5"], fields["load15"] = load
    memory = data.get("memory")
    if memory is not None:
        fields["memory_used_bytes"] = memory.get("used_bytes")
        fields["memory_available_bytes"] = memory.get("available_bytes")
    if cpu is not None or memory is not None:
        fields["measured_at"] = now
    if "filesystems" in data:
        fields["filesystems_reported_at"] = now
    if "weights" in data:
        fields["weights_probed"] = bool(data["weights"].get("probed"))
    if "gpus" in data or "sensors" in data:
        fields["telemetry_at"] = now
    for key, column in (("gpus", "gpu_telemetry"), ("sensors", "sensors")):
        if key in data:
            fields[column] = data[key]
    if "ports" in data:
        fields["port_samples"], fields["ports_at"] = data["ports"], now
    if "shards" in data:
        fields["shard_samples"] = data["shards"]
    for key in ("engines", "engines_probed", "warnings", "notices"):
        if key in data:
            fields[key] = data[key]
    health = gpus.health_key(data)
    if health is not None:
        # Unchanged wear writes no Gpu row, yet it is as current as the
        # heartbeat: without this a fault held for minutes would read stale.
        # The previous time dates the cards a changed report leaves out.
        fields["wear_previously_reported_at"] = F("wear_reported_at")
        fields["wear_reported_at"] = now

    row = _update_returning(fields, where)
    if row is None:
        return None
    # registered_at comes back unconverted (a string on SQLite): only
    # whether it is null matters.
    (
        pk,
        name,
        state,
        registered_at,
        filesystems_digest,
        weights_digest,
        gpu_state,
        gpu_health,
        ports_digest,
        managers_digest,
        shards_digest,
        desired,
    ) = row

    digests: dict[str, str] = {}
    if "filesystems" in data and (digest := _digest(data["filesystems"])) != filesystems_digest:
        digests["filesystems_digest"] = digest
    if "weights" in data and (digest := _digest(data["weights"])) != weights_digest:
        digests["weights_digest"] = digest
    if "gpus" in data and (digest := _digest(gpus.state_key(data["gpus"]))) != gpu_state:
        digests["gpu_state_digest"] = digest
    if "ports" in data:
        key = fabric_services.port_key(data)
        if (digest := _digest(key["ports"])) != ports_digest:
            digests["ports_digest"] = digest
        if key["managers"] and (digest := _digest(key["managers"])) != managers_digest:
            digests["managers_digest"] = digest
    if (
        "shards" in data
        and (digest := _digest(shard_reports.state_key(data["shards"]))) != shards_digest
    ):
        digests["shards_digest"] = digest
    if health is not None and (digest := _digest(health)) != gpu_health:
        digests["gpu_health_digest"] = digest
    if digests or state != NodeState.READY:
        _store_changes(pk, data, digests, now)
        if state != NodeState.READY:
            log.info("node %s is Ready", name)
    return {
        "node": name,
        "state": NodeState.READY,
        "register": registered_at is None,
        # JSON comes back as text from a raw cursor on some backends.
        "desired": json.loads(desired) if isinstance(desired, str) else (desired or {}),
    }


_RETURNING = (
    "id",
    "name",
    "state",
    "registered_at",
    "filesystems_digest",
    "weights_digest",
    "gpu_state_digest",
    "gpu_health_digest",
    "ports_digest",
    "managers_digest",
    "shards_digest",
    "desired",
)


def _update_returning(fields: dict[str, Any], where: dict[str, Any]) -> tuple[Any, ...] | None:
    """UPDATE ... RETURNING, which the ORM cannot say: the row's identity,
    state and stored digests come back with the write. Values are prepared
    by the model's own fields (JSON, time zones), so this is the SQL that
    QuerySet.update() would send, plus its RETURNING clause."""
    quote = connection.ops.quote_name
    opts = Node._meta
    sets, params = [], []
    for name, value in fields.items():
        field = opts.get_field(name)
        if isinstance(value, F):
            # Another column as it was before this UPDATE: PostgreSQL and
            # SQLite evaluate every SET expression against the old row.
            sets.append(f"{quote(field.column)} = {quote(opts.get_field(value.name).column)}")
            continue
        sets.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    conditions = []
    for name, value in where.items():
        field = opts.get_field(name)
        if value is None:
            conditions.append(f"{quote(field.column)} IS NULL")
        else:
            conditions.append(f"{quote(field.column)} = %s")
            params.append(field.get_db_prep_value(value, connection))
    returning = [quote(opts.get_field(name).column) for name in _RETURNING]
    asynchronous = ""
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        # Commit without waiting for the WAL flush (fsync), for this one
        # statement's own transaction only: set_config(..., true) lasts until
        # its commit, and the commit is what reads it. Measurements are
        # replaced every 10 s, so a crash losing the last few hundred ms of
        # them (the next heartbeat brings them back) is harmless, and waiting
        # for the disk was most of a heartbeat's time. Every other write,
        # this connection's next statement included, stays durable. Inside a
        # caller's transaction it is left out: it would make the caller's
        # commit asynchronous too.
        asynchronous = (
            " FROM (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit"
        )
    sql = (
        f"UPDATE {quote(opts.db_table)} SET {', '.join(sets)}{asynchronous} "
        f"WHERE {' AND '.join(conditions)} RETURNING {', '.join(returning)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


@transaction.atomic
def _store_changes(pk: int, data: dict[str, Any], digests: dict[str, str], now: datetime) -> None:
    # Locked and compared again: two heartbeats of one node racing must not
    # both replace its filesystems, and a node revoked since the UPDATE
    # above authenticated it must not be marked Ready.
    node = Node.objects.select_for_update().filter(pk=pk).first()
    if node is None:
        return
    changes: dict[str, Any] = {}
    if "filesystems_digest" in digests and digests["filesystems_digest"] != node.filesystems_digest:
        _replace_filesystems(node, data["filesystems"], now)
        changes["filesystems_digest"] = digests["filesystems_digest"]
    if "weights_digest" in digests and digests["weights_digest"] != node.weights_digest:
        _replace_holdings(node, data["weights"].get("models") or [])
        changes["weights_digest"] = digests["weights_digest"]
    if "gpu_state_digest" in digests and digests["gpu_state_digest"] != node.gpu_state_digest:
        gpus.store_state(node, data["gpus"])
        changes["gpu_state_digest"] = digests["gpu_state_digest"]
    if "gpu_health_digest" in digests and digests["gpu_health_digest"] != node.gpu_health_digest:
        changes.update(gpus.store_health(node, data, now))
        changes["gpu_health_digest"] = digests["gpu_health_digest"]
    port_digests = {k: v for k, v in digests.items() if k in ("ports_digest", "managers_digest")}
    if any(getattr(node, k) != v for k, v in port_digests.items()):
        changes.update(fabric_services.observe(node, data, now))
        changes.update(port_digests)
    if "shards_digest" in digests and digests["shards_digest"] != node.shards_digest:
        replicas = shard_reports.store(node, data["shards"], now)
        changes["shards_digest"] = digests["shards_digest"]
        if replicas:
            transaction.on_commit(reconcile_soon)
    if node.state != NodeState.READY and not node.revoked_at:
        changes["state"] = NodeState.READY
    if changes:
        Node.objects.filter(pk=pk).update(**changes)
        events.publish("node_changed", node=node.name, changes=changes)


def reconcile_soon() -> None:
    """A shard changed state: let the reconciler look now rather than at its
    next tick (a failed replica is replaced, a ready one may free the queue)."""
    from llmgw.serving.tasks import reconcile

    reconcile.delay()


def _replace_filesystems(node: Node, filesystems: list[dict[str, Any]], now: datetime) -> None:
    Filesystem.objects.filter(node=node).delete()
    Filesystem.objects.bulk_create(
        Filesystem(
            node=node,
            mount=fs["mount"],
            device=fs.get("device") or "",
            fstype=fs.get("fstype") or "",
            shared=fs["shared"],
            free_bytes=fs["free_bytes"],
            total_bytes=fs["total_bytes"],
            dirs=fs.get("dirs") or [],
            reported_at=now,
        )
        for fs in filesystems
    )


def _replace_holdings(node: Node, models: list[dict[str, Any]]) -> None:
    ModelHolding.objects.filter(node=node).delete()
    ModelHolding.objects.bulk_create(
        ModelHolding(node=node, model_name=m["name"], path=m["path"], shared=m["shared"])
        for m in models
    )


# --- operators --------------------------------------------------------------


@transaction.atomic
def cordon(name: str, reason: str, actor: str) -> Node:
    if not reason.strip():
        raise InventoryError("a cordon needs a reason: the next operator will ask why")
    node = _locked(name)
    node.cordoned, node.cordon_reason = True, reason.strip()
    node.cordoned_by, node.cordoned_at = actor, timezone.now()
    node.save(update_fields=["cordoned", "cordon_reason", "cordoned_by", "cordoned_at"])
    _audit(name, actor, "cordon", reason)
    return node


@transaction.atomic
def uncordon(name: str, actor: str, reason: str = "") -> Node:
    node = _locked(name)
    node.cordoned, node.cordon_reason, node.cordoned_by, node.cordoned_at = False, "", "", None
    node.save(update_fields=["cordoned", "cordon_reason", "cordoned_by", "cordoned_at"])
    _audit(name, actor, "uncordon", reason)
    return node


@transaction.atomic
def set_labels(name: str, labels: dict[str, str | None], actor: str) -> Node:
    """Operator labels; a None value removes the operator's label (the
    agent's, if any, shows through again)."""
    node = _locked(name)
    merged = dict(node.operator_labels or {})
    for key, value in labels.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    node.operator_labels = merged
    node.save(update_fields=["operator_labels"])
    _audit(name, actor, "label", json.dumps(labels, sort_keys=True))
    return node


def _locked(name: str) -> Node:
    try:
        return Node.objects.select_for_update().get(name=name)
    except Node.DoesNotExist:
        raise InventoryError(f"no node named {name}") from None


# --- staleness --------------------------------------------------------------


def is_ready(node: Node, now: datetime | None = None) -> bool:
    """Ready unless three heartbeat intervals have passed in silence. Read
    from the timestamps, so a page is right even when the worker that
    persists the state is behind."""
    if node.state != NodeState.READY or node.last_heartbeat_at is None:
        return False
    now = now or timezone.now()
    allowed = timedelta(seconds=node.heartbeat_interval_s * settings.MISSED_HEARTBEATS_NOT_READY)
    return now - node.last_heartbeat_at <= allowed


def effective_state(node: Node, now: datetime | None = None) -> str:
    return NodeState.READY if is_ready(node, now) else NodeState.NOT_READY


# A staleness pass runs every 5 s; one that finds the last pass this much
# older knows the control plane itself was out (its database, its worker).
STALENESS_GAP_S = 20.0


@transaction.atomic
def _listening_since(now: datetime) -> datetime | None:
    """When the control plane last began to hear the fleet again after a
    gap in its own staleness passes; None when it never stopped."""
    row = StalenessPass.objects.select_for_update().filter(pk=1).first()
    if row is None:
        StalenessPass.objects.create(pk=1, last_pass_at=now)
        return None
    if (now - row.last_pass_at).total_seconds() > STALENESS_GAP_S:
        log.warning(
            "staleness: no pass since %s; the control plane was out, so every node "
            "gets its full grace from now",
            row.last_pass_at.isoformat(timespec="seconds"),
        )
        row.resumed_at = now
    row.last_pass_at = max(row.last_pass_at, now)
    row.save(update_fields=["last_pass_at", "resumed_at"])
    return row.resumed_at


def mark_missed_heartbeats(now: datetime | None = None) -> list[str]:
    """Persist NotReady for nodes that went silent; returns their names.

    Silence is counted from when the control plane could hear: after an
    outage of its own (PostgreSQL down, so heartbeats were refused and this
    check could not run) every node was marked NotReady within seconds of
    the database's return, before its agent's next retry."""
    now = now or timezone.now()
    missed = settings.MISSED_HEARTBEATS_NOT_READY
    changed: list[str] = []
    resumed = _listening_since(now)
    intervals = Node.objects.filter(state=NodeState.READY).values_list(
        "heartbeat_interval_s", flat=True
    )
    for interval in set(intervals):
        deadline = now - timedelta(seconds=interval * missed)
        if resumed is not None and resumed > deadline:
            continue  # not yet a full grace of listening since the outage
        stale = Node.objects.filter(
            state=NodeState.READY,
            heartbeat_interval_s=interval,
            last_heartbeat_at__lt=deadline,
        )
        names = list(stale.values_list("name", flat=True))
        if names and stale.filter(name__in=names).update(state=NodeState.NOT_READY):
            changed.extend(names)
    for name in changed:
        log.warning("node %s missed %d heartbeats: NotReady", name, missed)
    return changed
