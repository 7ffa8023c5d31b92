"""State changes to the inventory. Views and commands call these; each is one
transaction, and nothing else writes these tables."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from llmgw_agent.protocol.bounds import NAME

from llmgw import events
from llmgw.accounts import certificates, hashing
from llmgw.database import rows
from llmgw.database.atomic import atomic
from llmgw.inventory import commands, credentials, gpus, readiness, registering, sections
from llmgw.inventory.choices import NodeState
from llmgw.inventory.models import AuditEvent, Node, StalenessPass

log = logging.getLogger("llmgw.inventory")


class InventoryError(Exception):
    """A refused operation, with a message fit for the operator."""


def _audit(node_name: str, actor: str, action: str, detail: str = "") -> None:
    # A statement composed once (llmgw.database.rows): every node joining writes one.
    rows.insert([AuditEvent(node_name=node_name, actor=actor, action=action, detail=detail)])


# --- identity ---------------------------------------------------------------


# The names an agent can report as: the protocol's, which its payloads'
# `node` is checked against; the console and the API put the name in their
# URLs. A node added under another name could never join.
NODE_NAME = re.compile(NAME)
# Names the node API's own routes take: /api/v1/nodes/summary is the fleet's
# summary, so a node of that name could never be read by its name.
RESERVED_NAMES = frozenset({"summary"})


def _name_refusal(name: str) -> str | None:
    if not NODE_NAME.match(name):
        return (
            f"node name {name!r} is refused: an agent reports as letters, digits, '.', '_' "
            f"and '-', starting with a letter or a digit, 253 characters at most"
            + (f" (this one has {len(name)})" if len(name) > 253 else "")
        )
    if name in RESERVED_NAMES:
        return (
            f"node name {name!r} is refused: /api/v1/nodes/{name} is the fleet's {name}, "
            "so the node could not be read by its name"
        )
    return None


@atomic
def add_node(name: str, actor: str) -> str:
    """Create (or re-open) a node and return its one-time join token."""
    refusal = _name_refusal(name)
    if refusal is not None:
        raise InventoryError(refusal)
    node, _ = Node.objects.select_for_update().get_or_create(name=name)
    if node.credential_hash and not node.revoked_at:
        raise InventoryError(f"node {name} has already joined; revoke it first to re-join")
    token = credentials.new_secret()
    node.join_token_hash = hashing.digest(token)
    node.join_token_expires_at = timezone.now() + timedelta(seconds=settings.JOIN_TOKEN_TTL_S)
    node.revoked_at = None
    node.save()
    _audit(name, actor, "node-add")
    return token


def add_nodes(names: list[str], actor: str) -> dict[str, str]:
    """add_node for many names at once: each one's join token. Names new to
    the inventory are added with a statement per table, not five each (a
    simulated fleet of thousands adds them all at its start); the others
    go through add_node one by one, refused as it refuses them. One refusal
    adds none of them."""
    with transaction.atomic():
        taken = set(Node.objects.filter(name__in=names).values_list("name", flat=True))
        fresh = [name for name in dict.fromkeys(names) if name not in taken]
        for name in fresh:
            refusal = _name_refusal(name)
            if refusal is not None:
                raise InventoryError(refusal)
        tokens = {name: credentials.new_secret() for name in fresh}
        expires = timezone.now() + timedelta(seconds=settings.JOIN_TOKEN_TTL_S)
        Node.objects.bulk_create(
            Node(name=name, join_token_hash=hashing.digest(token), join_token_expires_at=expires)
            for name, token in tokens.items()
        )
        AuditEvent.objects.bulk_create(
            AuditEvent(node_name=name, actor=actor, action="node-add") for name in tokens
        )
        for name in names:
            if name in taken:
                tokens[name] = add_node(name, actor)
    return tokens


# The ORM's update(), built anew for every node of a fleet joining at once.
_JOIN = (
    f"UPDATE {Node._meta.db_table} SET join_token_hash = '', join_token_expires_at = NULL, "
    "credential_hash = %s WHERE name = %s AND join_token_hash = %s AND join_token_expires_at > %s"
)


def join(name: str, token: str) -> str:
    """Trade a join token for the node's own credential, exactly once."""
    now = timezone.now()
    credential, cred_digest = credentials.make_credential(name)
    with transaction.atomic():
        # Compare-and-set on the token digest: two agents racing with one
        # token cannot both win.
        with connection.cursor() as cursor:
            cursor.execute(_JOIN, [cred_digest, name, hashing.digest(token), now])
            won = cursor.rowcount
        if won == 1:
            _audit(name, "agent", "join")
    if won != 1:
        # Outside the block above: a refusal raised inside it would roll its
        # own audit row back, and a token being guessed is worth a record.
        _audit(name, "agent", "join-refused", "unknown node, used or expired token")
        raise InventoryError("join refused: unknown node, or the token was used or has expired")
    return credential


@atomic
def revoke_node(name: str, actor: str) -> None:
    node = _locked(name)
    Node.objects.filter(pk=node.pk).update(
        credential_hash="", join_token_hash="", revoked_at=timezone.now(), state=NodeState.NOT_READY
    )
    # Its certificates too: a node is one identity, however it proves it.
    revoked = certificates.revoke(name, timezone.now())
    _audit(name, actor, "node-revoke", f"{revoked} certificates revoked" if revoked else "")
    # Its open command streams are closed now, not at their next poll.
    transaction.on_commit(lambda: commands.close_streams(node.pk, node.credential_hash))


def authenticate(credential: str) -> Node | None:
    parts = credentials.split_credential(credential)
    if parts is None:
        return None
    name, secret = parts
    try:
        # get(), not first(): the name is unique, and first()'s ORDER BY
        # was most of what building this query cost, on every registration.
        node: Node = Node.objects.get(name=name)
    except Node.DoesNotExist:
        return None
    if node.revoked_at or not credentials.matches(secret, node.credential_hash):
        return None
    return node


def authenticate_stream(credential: str) -> tuple[int, str, bool] | None:
    """For a command stream opening with `credential`: the key and
    credential digest of the node authenticate() would return (all a stream
    keeps of its row), and whether a command waits for it. One statement:
    a whole fleet's streams open at once after an outage, and a second
    round trip each to find nothing waiting was a third of what opening
    one cost the database."""
    parts = credentials.split_credential(credential)
    if parts is None:
        return None
    name, secret = parts
    key = commands.stream_key(name)
    if key is None or not credentials.matches(secret, key[1]):
        return None
    return key


def refuse_impersonation(node: Node, claimed: object, path: str) -> None:
    log.warning("node %s sent a payload for node %r to %s: refused", node.name, claimed, path)
    _audit(node.name, node.name, "impersonation-refused", f"payload named {claimed!r} on {path}")


# --- agent reports ----------------------------------------------------------


@atomic
def register(node: Node, data: dict[str, Any], address: str | None) -> Node:
    """Store what the agent says the node is, and `address`, where the
    registration came from (None: not an IP address, so unknown). Cordons and
    operator labels are the operator's and are never touched here."""
    stored = registering.store(registering.values(data, address), id=node.pk)
    if stored is None:
        raise Node.DoesNotExist(f"node {node.name} is gone")
    return _registered(*stored, data)


@atomic
def register_by_credential(
    credential: str, data: dict[str, Any], address: str | None
) -> Node | None:
    """register() for the node `credential` authenticates, authenticated by
    the statement that stores it; None, having written nothing, when the
    credential authenticates no node."""
    parts = credentials.split_credential(credential)
    if parts is None:
        return None
    name, secret = parts
    row = registering.values(data, address)
    stored = registering.store(row, name=name, credential_hash=hashing.digest(secret))
    return None if stored is None else _registered(*stored, data)


def _registered(node: Node, has_cards: bool, data: dict[str, Any]) -> Node:
    gpus.register(node, data.get("gpus") or [], has_cards)
    for hook in sections.registration_hooks():
        hook(node)
    return node


# --- operators --------------------------------------------------------------


@atomic
def cordon(name: str, reason: str, actor: str) -> Node:
    if not reason.strip():
        raise InventoryError("a cordon needs a reason: the next operator will ask why")
    node = _locked(name)
    node.cordoned, node.cordon_reason = True, reason.strip()
    node.cordoned_by, node.cordoned_at = actor, timezone.now()
    node.save(update_fields=["cordoned", "cordon_reason", "cordoned_by", "cordoned_at"])
    _audit(name, actor, "cordon", reason)
    events.publish("node_changed", node=name, changes={"cordoned": True})
    return node


@atomic
def uncordon(name: str, actor: str, reason: str = "") -> Node:
    node = _locked(name)
    node.cordoned, node.cordon_reason, node.cordoned_by, node.cordoned_at = False, "", "", None
    node.save(update_fields=["cordoned", "cordon_reason", "cordoned_by", "cordoned_at"])
    _audit(name, actor, "uncordon", reason)
    events.publish("node_changed", node=name, changes={"cordoned": False})
    return node


@atomic
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
    events.publish("node_changed", node=name, changes={"operator_labels": merged})
    return node


def _locked(name: str) -> Node:
    try:
        node: Node = Node.objects.select_for_update().get(name=name)
        return node
    except Node.DoesNotExist:
        raise InventoryError(f"no node named {name}") from None


# --- staleness --------------------------------------------------------------


def is_ready(node: Node, now: datetime | None = None) -> bool:
    """Ready by llmgw.inventory.readiness's rule: read from the timestamps,
    so a page is right even when the worker that persists the state is
    behind, and never for the time the control plane could not hear."""
    if node.state != NodeState.READY or node.last_heartbeat_at is None:
        # Not Ready on record, whatever the control plane heard: a node
        # joining is answered without reading the hearing record.
        return False
    now = now or timezone.now()
    return readiness.is_ready(
        node.state, node.last_heartbeat_at, node.heartbeat_interval_s, now, readiness.at(now)
    )


def effective_state(node: Node, now: datetime | None = None) -> str:
    return NodeState.READY if is_ready(node, now) else NodeState.NOT_READY


def _passed(now: datetime) -> None:
    """Record that the pass ran: the periodic schedule is alive."""
    if not StalenessPass.objects.filter(pk=1).update(last_pass_at=now):
        StalenessPass.objects.get_or_create(pk=1, defaults={"last_pass_at": now})


def mark_missed_heartbeats(now: datetime | None = None) -> list[str]:
    """Persist NotReady for nodes that went silent; returns their names.

    Silence is counted while the control plane could hear
    (llmgw.inventory.readiness): after an outage of its own (PostgreSQL
    down, or its web processes) every node was marked NotReady within
    seconds of the return, before its agent's next retry."""
    now = now or timezone.now()
    _passed(now)
    hearing = readiness.load()
    changed: list[str] = []
    intervals = Node.objects.filter(state=NodeState.READY).values_list(
        "heartbeat_interval_s", flat=True
    )
    for interval in set(intervals):
        cutoff = readiness.silent_before(interval, now, hearing)
        if cutoff is not None:
            changed += _mark_silent(interval, cutoff)
    changed.sort()
    for name in changed:
        log.warning(
            "node %s missed %d heartbeats: NotReady", name, settings.MISSED_HEARTBEATS_NOT_READY
        )
    if changed:
        events.publish("nodes_not_ready", nodes=changed)
    return changed


def _mark_silent(interval: int, deadline: datetime) -> list[str]:
    """NotReady for the Ready nodes of this interval heard last before
    `deadline`, in one statement; the names of exactly those it changed.

    A row a heartbeat batch is writing at this moment is skipped (SKIP
    LOCKED): it is being heard, so it is not silent, and waiting for it
    is what deadlocked. The batch locks its rows in name order, this
    update took them in the table's order; at 5,000 nodes each deadlock
    failed either the staleness pass or a batch of hundreds of live
    nodes' heartbeats (answered 503). The names come back from the update
    itself: nodes heard between a separate read and the update used to be
    logged NotReady though they were not."""
    quote = connection.ops.quote_name
    table = quote(Node._meta.db_table)
    skip = (
        " FOR UPDATE SKIP LOCKED" if connection.features.has_select_for_update_skip_locked else ""
    )
    sql = (
        f"UPDATE {table} SET {quote('state')} = %s WHERE {quote('id')} IN ("
        f"SELECT {quote('id')} FROM {table} WHERE {quote('state')} = %s"
        f" AND {quote('heartbeat_interval_s')} = %s AND {quote('last_heartbeat_at')} < %s{skip})"
        f" RETURNING {quote('name')}"
    )
    at = connection.ops.adapt_datetimefield_value(deadline)
    with connection.cursor() as cursor:
        cursor.execute(sql, [NodeState.NOT_READY, NodeState.READY, interval, at])
        return [row[0] for row in cursor.fetchall()]
