"""The command stream's bookkeeping: queue a command for a node, hand it to
the node's stream exactly once, store what came back.

The database is the truth and the channel layer only a wake-up call: a
command queued by a worker in another process reaches the agent within the
stream's poll interval (1 s) even when no shared channel layer exists (the
embedded default), and at once when one does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.utils import timezone

from llmgw.accounts.models import NodeCertificate
from llmgw.inventory.models import AgentCommand, CommandState, Node

log = logging.getLogger("llmgw.commands")
MAX_OUTPUT = 64 * 1024 * 1024

# Command kind -> what to do with a finished command (done, failed or
# expired). Registered by the app that sends the kind, in its ready().
_ON_FINISH: dict[str, list[Callable[[AgentCommand], None]]] = {}


def on_finish(kind: str, handler: Callable[[AgentCommand], None]) -> None:
    if handler not in _ON_FINISH.setdefault(kind, []):
        _ON_FINISH[kind].append(handler)


def _finished(command: AgentCommand) -> None:
    for handler in _ON_FINISH.get(command.kind, ()):
        try:
            handler(command)
        except Exception:  # the result is stored; one handler's bug must not lose it
            log.exception("handling the result of %s failed", command)


def group(node_id: int, credential_hash: str) -> str:
    """The channel group of the node's streams opened with this credential.
    It changes with every join, so a socket opened before a revocation never
    hears of the next credential's commands (the digest's head only: the
    name is not a secret, and the digest of a 256-bit secret gives none away)."""
    return f"agent-{node_id}-{credential_hash[:16]}"


def send(
    node: Node,
    kind: str,
    args: dict[str, Any] | None = None,
    *,
    actor: str = "system",
    timeout_s: int = 120,
) -> AgentCommand:
    with transaction.atomic():
        command: AgentCommand = AgentCommand.objects.create(
            node=node, kind=kind, args=args or {}, requested_by=actor, timeout_s=timeout_s
        )
        transaction.on_commit(lambda: _wake(node.pk))
    return command


def _wake(node_id: int) -> None:
    held = Node.objects.filter(pk=node_id).values_list("credential_hash", flat=True).first()
    if held:
        _group_send(group(node_id, held), "agent.command")


def close_streams(node_id: int, credential_hash: str) -> None:
    """Close the node's streams opened with this credential, now: called on
    the commit of a revocation. A stream the message misses (no shared
    channel layer) closes at its next poll, within a second."""
    if credential_hash:
        _group_send(group(node_id, credential_hash), "agent.revoked")


def _group_send(name: str, kind: str) -> None:
    layer = get_channel_layer()
    if layer is not None:
        try:
            async_to_sync(layer.group_send)(name, {"type": kind})
        except Exception:  # the stream's poll does it anyway, within a second
            log.debug("could not send %s to %s", kind, name, exc_info=True)


# What a stream opened with a certificate holds: this and the certificate's
# serial. A credential's digest is hex, so the two never meet.
CERT_HELD = "cert-"


def holds(node_id: int, credential_hash: str) -> bool:
    """Whether the node's credential (or certificate) is still the one a
    stream opened with."""
    if credential_hash.startswith(CERT_HELD):
        name = Node.objects.filter(pk=node_id, revoked_at=None).values_list("name", flat=True)
        held: bool = NodeCertificate.objects.filter(
            serial=credential_hash[len(CERT_HELD) :],
            node_name__in=name,
            revoked_at=None,
            not_after__gt=timezone.now(),
        ).exists()
        return held
    return bool(credential_hash) and bool(
        Node.objects.filter(pk=node_id, credential_hash=credential_hash, revoked_at=None).exists()
    )


def _held(credential_hash: str | None) -> dict[str, Any]:
    # In the UPDATE's own WHERE, not a check before it: a revocation or a
    # re-join committed between the two would otherwise let an old socket
    # take a command or answer one.
    # An empty digest (a revoked node's) holds nothing: it becomes IS NULL,
    # which the column never is.
    if credential_hash is None:
        return {}
    if credential_hash.startswith(CERT_HELD):
        # Revoking a node marks it and its certificates in one transaction,
        # so the node's revoked_at is as good a witness here.
        return {"node__revoked_at": None}
    return {"node__credential_hash": credential_hash or None, "node__revoked_at": None}


def due(streams: Iterable[tuple[int, str]]) -> tuple[set[tuple[int, str]], set[int]]:
    """Of the streams one web process holds, as (node id, what it holds):
    those whose node holds that credential no longer, and the nodes with a
    command pending. One query for any number of streams opened with a
    credential (a certificate's is checked on its own, as holds() does):
    a query or two a second per stream was, for a fleet of thousands, more
    than all its heartbeats."""
    streams = set(streams)
    ids = {node_id for node_id, _ in streams}
    current, pending = _current_and_pending(ids)
    gone = {
        (node_id, held)
        for node_id, held in streams
        if not (
            holds(node_id, held)
            if held.startswith(CERT_HELD)
            else bool(held) and current.get(node_id) == held
        )
    }
    return gone, pending


def _waits(node: str) -> str:
    """SQL: whether a command is pending for the node `node` names (a
    column, or %s for a parameter). Written once for the statements below."""
    return (
        f"EXISTS (SELECT 1 FROM {AgentCommand._meta.db_table} c"
        f" WHERE c.node_id = {node} AND c.state = '{str(CommandState.PENDING)}')"
    )


# One statement, its ids one array parameter: the ORM's IN list of a web
# process's 2,500 streams, built twice a second, was a fifth of the
# process's time at 5,000 nodes.
DUE = f"""
SELECT n.id, n.credential_hash, {_waits("n.id")}
FROM {Node._meta.db_table} n WHERE n.id = ANY(%s) AND n.revoked_at IS NULL
"""


def _current_and_pending(ids: set[int]) -> tuple[dict[int, str], set[int]]:
    """Of these nodes, the credential digest of each not revoked, and those
    with a command pending (a revoked node's do not matter: it is gone)."""
    with connection.cursor() as cursor:
        cursor.execute(DUE, [list(ids)])
        rows = cursor.fetchall()
    return {pk: digest for pk, digest, _ in rows}, {pk for pk, _, waits in rows if waits}


# holds() for a credential, and whether a command is pending, in one
# statement: a stream asks at every wake-up and poll that finds its node
# due, and the two ORM queries cost the web process more than the rest.
HOLDS_AND_WAITS = f"""
SELECT EXISTS (
    SELECT 1 FROM {Node._meta.db_table} n
    WHERE n.id = %s AND n.credential_hash = %s AND n.revoked_at IS NULL
), {_waits("%s")}
"""


def _holds_and_waits(node_id: int, credential_hash: str) -> tuple[bool, bool]:
    with connection.cursor() as cursor:
        cursor.execute(HOLDS_AND_WAITS, [node_id, credential_hash, node_id])
        holding, waiting = cursor.fetchone()
    return bool(holding), bool(waiting)


# A stream's node by name, its credential digest, and whether a command waits.
STREAM_KEY = f"""
SELECT n.id, n.credential_hash, {_waits("n.id")}
FROM {Node._meta.db_table} n WHERE n.name = %s AND n.revoked_at IS NULL
"""


def stream_key(name: str) -> tuple[int, str, bool] | None:
    """The node named `name`, not revoked: its key, its credential digest,
    and whether a command waits for it (services.authenticate_stream checks
    the credential against the digest)."""
    with connection.cursor() as cursor:
        cursor.execute(STREAM_KEY, [name])
        row = cursor.fetchone()
    return None if row is None else (int(row[0]), str(row[1]), bool(row[2]))


def claim(node_id: int, held: str | None = None) -> list[AgentCommand] | None:
    """Pending commands for the node, marked sent. Compare-and-set on the
    state, so two deliveries racing (a wake-up and a poll) send each once.

    A stream passes `held`, the digest of the credential it opened with; it
    gets None when the node holds that credential no longer (revoked, or
    joined again since), and must close."""
    if held and not held.startswith(CERT_HELD):
        holding, waiting = _holds_and_waits(node_id, held)
        if not holding:
            return None
        if not waiting:
            return []  # nearly every wake-up
    elif held is not None and not holds(node_id, held):
        return None
    now = timezone.now()
    claimed = []
    for command in AgentCommand.objects.filter(
        node_id=node_id, state=CommandState.PENDING
    ).order_by("pk"):
        won = AgentCommand.objects.filter(
            pk=command.pk, state=CommandState.PENDING, **_held(held)
        ).update(state=CommandState.SENT, sent_at=now)
        if won:
            claimed.append(command)
    return claimed


def finish(node_id: int, result: dict[str, Any], held: str | None = None) -> AgentCommand | None:
    """Store a result. A node can only answer its own commands, and a
    stream (`held`, as for claim) only while its credential is the node's."""
    try:
        pk = int(result.get("id"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    ok = bool(result.get("ok"))
    output = str(result.get("output") or "")[:MAX_OUTPUT]
    error = str(result.get("error") or "")[:10_000]
    updated = AgentCommand.objects.filter(
        pk=pk, node_id=node_id, state=CommandState.SENT, **_held(held)
    ).update(
        state=CommandState.DONE if ok else CommandState.FAILED,
        output=output,
        error=error,
        finished_at=timezone.now(),
    )
    if not updated:
        log.warning("node %s answered command %s, which is not its own or not waiting", node_id, pk)
        return None
    command: AgentCommand = AgentCommand.objects.select_related("node").get(pk=pk)
    _finished(command)
    return command


def expire(now=None) -> int:  # type: ignore[no-untyped-def]
    """Fail commands nobody answered in time, saying so."""
    now = now or timezone.now()
    expired = 0
    for command in AgentCommand.objects.filter(state__in=[CommandState.PENDING, CommandState.SENT]):
        if command.created_at + timedelta(seconds=command.timeout_s) < now:
            won = AgentCommand.objects.filter(pk=command.pk, state=command.state).update(
                state=CommandState.FAILED,
                finished_at=now,
                error=f"no answer within {command.timeout_s} s ({command.state} to the agent)",
            )
            if won:
                expired += 1
                command.refresh_from_db()
                _finished(command)
    return expired
