"""What agents report of their shards, applied to the replicas: the
heartbeat's "shards" section (llmgw.inventory.sections)."""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction
from django.utils import timezone

from llmgw.database import rows
from llmgw.inventory.models import Node
from llmgw.inventory.sections import Section
from llmgw.serving import tasks
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica, Shard

PROGRESS: list[str] = [
    ReplicaState.PENDING,
    ReplicaState.STARTING,
    ReplicaState.LOADING,
    ReplicaState.READY,
]
STATE_FIELDS = ("id", "state", "url", "pid", "restarts", "generation", "message")


def state_key(shards: list[dict[str, Any]]) -> list[list[Any]]:
    """What of a shard report changes a replica: not its cores or memory."""
    return [[s.get(k) for k in STATE_FIELDS] for s in shards]


def replica_state(states: list[str]) -> str:
    """A replica fails whole and is ready only whole."""
    if not states:
        return ReplicaState.PENDING
    if ReplicaState.FAILED in states:
        return ReplicaState.FAILED
    if ReplicaState.LOST in states:
        return ReplicaState.LOST
    if ReplicaState.STOPPING in states:
        return ReplicaState.STOPPING
    return min(states, key=lambda s: PROGRESS.index(s) if s in PROGRESS else 0)


# Engines run unprivileged on ports the agent picks (the kernel's ephemeral
# range, or a restarted engine's old one); below 1024 is another service.
MIN_PORT = 1024


def route(address: str | None, url: str) -> tuple[str, str]:
    """(the URL the gateway may send prompts to, "") or ("", why not).

    Only the port is the agent's word: the host is the node's registered
    address, so a node cannot route users' prompts to a machine of its
    choosing, and a URL naming any other host, a path or a privileged port
    is refused, saying why."""
    if not url:
        return "", ""  # not listening yet
    try:
        parts = urlsplit(url)
        port = parts.port
        host = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        port, host = None, None
    if address is None:
        return "", "this node's address is unknown until its agent registers again"
    mine = ipaddress.ip_address(address)
    if isinstance(host, ipaddress.IPv6Address) and host.ipv4_mapped:
        host = host.ipv4_mapped
    if parts.scheme != "http" or parts.username is not None or parts.path not in ("", "/"):
        return "", "expected http://ADDRESS:PORT, nothing more"
    if host != mine:
        return "", (
            f"the host is not {mine}, the address this node registers from; "
            "set the agent's advertise_host to it"
        )
    if port is None or not MIN_PORT <= port <= 65535:
        return "", f"the port must be {MIN_PORT}-65535, where an engine listens"
    return (f"http://[{mine}]:{port}" if mine.version == 6 else f"http://{mine}:{port}"), ""


def store(node: Node, reports: list[dict[str, Any]], now: datetime | None = None) -> set[int]:
    """Update this node's shards from its report; returns replicas whose
    state changed. A shard the agent does not mention is pending (the agent
    has not picked it up yet)."""
    now = now or timezone.now()
    by_id = {r.get("id"): r for r in reports}
    changed: set[int] = set()
    # Composed once (llmgw.database.rows): every node's first heartbeat
    # comes here, nearly always to find no shard at all. In the model's
    # order, as the ORM read them, so the updates lock rows as before.
    shards = sorted(rows.read(Shard, node=node.pk), key=lambda s: (s.replica_id, s.rank))
    for shard in shards:
        report = by_id.get(shard.shard_id)
        fields: dict[str, Any] = {}
        if report is None:
            if shard.state != ReplicaState.PENDING:
                fields = {"state": ReplicaState.PENDING, "message": "not reported by the agent"}
        else:
            reported = report.get("url") or ""
            url, refusal = route(node.address, reported)
            fields = {
                "state": report.get("state") or ReplicaState.PENDING,
                "url": url,
                "pid": report.get("pid"),
                "restarts": report.get("restarts") or 0,
                "message": report.get("message") or "",
                "reported_at": now,
            }
            if refusal:
                # Failed, not ready without a route: the reconciler replaces
                # it, and the operator reads why.
                fields["state"] = ReplicaState.FAILED
                fields["message"] = f"refused url {reported}: {refusal}"
        if fields:
            Shard.objects.filter(pk=shard.pk).update(**fields)
            changed.add(shard.replica_id)
    if not changed:
        return changed
    for replica in Replica.objects.filter(pk__in=changed).prefetch_related("shards"):
        state = replica_state([s.state for s in replica.shards.all()])
        if state != replica.state:
            Replica.objects.filter(pk=replica.pk).update(state=state, state_changed_at=now)
    return changed


def _store_section(node: Node, data: dict[str, Any], now: datetime) -> dict[str, Any]:
    if store(node, data["shards"], now):
        transaction.on_commit(reconcile_soon)
    return {}


def reconcile_soon() -> None:
    """A shard changed state: let the reconciler look now rather than at its
    next tick (a failed replica is replaced, a ready one may free the queue)."""
    tasks.reconcile_soon()


def _recorded(node: Node) -> dict[str, Any]:
    shards = Shard.objects.filter(node=node).select_related("replica__model")
    return {
        "shards": [
            {"replica": s.replica_id, "rank": s.rank, "model": s.replica.model.name}
            for s in shards.order_by("replica_id", "rank")
        ]
    }


SECTION = Section(
    name="shards",
    payload_keys=("shards",),
    columns=("shards_digest",),
    key=lambda data: {"shards_digest": state_key(data["shards"])},
    store=_store_section,
    recorded=_recorded,
)
