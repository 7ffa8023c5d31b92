"""Shards on nodes that stopped reporting are lost.

A node goes NotReady after it misses LLMGW_MISSED_HEARTBEATS heartbeats
(3 by default: 30 s at the agent's usual 10 s interval), which is the
grace before it is taken for dead. Its shards were still "ready" as the
agent last said: the gateway kept routing to them and answered 502 to
every request, and the reconciler, which replaced only failed replicas,
never moved them. Now every shard on a NotReady node is marked lost, with
when and why; a lost replica is no longer routed to, and the reconciler
releases it whole and places it again elsewhere in the same tick. When the
node comes back its desired state no longer names the released shards,
and its agent stops their engines.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from llmgw.database.atomic import atomic
from llmgw.inventory.choices import NodeState
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica, Shard

log = logging.getLogger("llmgw.reconciler")

# A shard in one of these is already being dealt with.
SETTLED = (ReplicaState.LOST, ReplicaState.FAILED)


@atomic
def mark_lost(now: datetime | None = None) -> list[int]:
    """Mark the shards of NotReady nodes lost; returns their replicas."""
    now = now or timezone.now()
    shards = list(
        Shard.objects.select_for_update(of=("self",))
        .filter(node__state=NodeState.NOT_READY)
        .exclude(state__in=SETTLED)
        .select_related("node")
    )
    for shard in shards:
        seen = shard.node.last_heartbeat_at
        when = seen.isoformat(timespec="seconds") if seen else "never"
        Shard.objects.filter(pk=shard.pk).update(
            state=ReplicaState.LOST,
            message=f"node {shard.node.name} stopped reporting (last heartbeat {when}); "
            f"marked lost at {now.isoformat(timespec='seconds')}",
        )
        log.warning("shard %s on NotReady node %s: lost", shard.shard_id, shard.node.name)
    replicas = sorted({s.replica_id for s in shards})
    Replica.objects.filter(pk__in=replicas).exclude(state=ReplicaState.FAILED).update(
        state=ReplicaState.LOST, state_changed_at=now
    )
    return replicas
