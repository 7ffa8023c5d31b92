"""What the gateway reads from the database, in its own thread.

Each function returns plain data and is called from the gateway's single
database thread (never from the event loop: the ORM blocks), so one
connection serves every refresh and a request never waits on SQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.db import close_old_connections, connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from llmgw.catalog.models import Model
from llmgw.inventory.choices import NodeState
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import LIMIT_FIELDS, ApiKey, Shard


@dataclass(frozen=True, slots=True)
class Limits:
    """A key's limits; None is no limit of that kind."""

    requests_per_minute: int | None
    tokens_per_minute: int | None
    max_concurrent_requests: int | None


@dataclass(frozen=True, slots=True)
class KeyScope:
    id: int
    name: str
    # None: every model.
    models: frozenset[str] | None
    # None: no limit at all, and the request path asks nothing of Redis.
    limits: Limits | None = None

    def allows(self, model: str) -> bool:
        return self.models is None or model in self.models


@dataclass(frozen=True, slots=True)
class Route:
    replica_id: int
    model: str
    url: str
    engine: str


def _usable() -> QuerySet[ApiKey]:
    # A key is cut with its owner: a disabled user's keys stop working at
    # the next load, and work again if the user is enabled again.
    return ApiKey.objects.filter(revoked_at__isnull=True).filter(
        Q(owner__isnull=True) | Q(owner__is_active=True)
    )


def load_keys(digests: list[str] | None = None) -> dict[str, KeyScope]:
    """Every usable key by its digest; only those of `digests` when given
    (the gateway asking about keys made since its table loaded)."""
    keys = _usable()
    scopes = ApiKey.allowed_models.through.objects.filter(apikey__all_models=False)
    if digests is not None:
        keys = keys.filter(digest__in=digests)
        scopes = scopes.filter(apikey__digest__in=digests)
    # Keys before their models: a key made between the two queries is left
    # for the next load, never taken in with no models (every model 404).
    rows = list(keys.values_list("id", "name", "digest", "all_models", *LIMIT_FIELDS))
    scoped: dict[int, set[str]] = {}
    for key_id, model in scopes.filter(apikey__revoked_at__isnull=True).values_list(
        "apikey_id", "model__name"
    ):
        scoped.setdefault(key_id, set()).add(model)
    return {
        digest: KeyScope(
            key_id,
            name,
            None if all_models else frozenset(scoped.get(key_id, ())),
            Limits(*limits) if any(v is not None for v in limits) else None,
        )
        for key_id, name, digest, all_models, *limits in rows
    }


def look_up(digests: list[str]) -> tuple[dict[str, KeyScope], set[str]]:
    """The usable keys among `digests`, and those that are merely held: not
    revoked, but their owner is disabled (which can be undone)."""
    found = load_keys(digests)
    absent = [d for d in digests if d not in found]
    if not absent:
        return found, set()
    held = ApiKey.objects.filter(digest__in=absent, revoked_at__isnull=True, owner__is_active=False)
    return found, set(held.values_list("digest", flat=True))


def load_keys_now() -> dict[str, KeyScope]:
    close_old_connections()
    return load_keys()


def load_routes() -> tuple[dict[str, int], tuple[Route, ...]]:
    """Every model name with its creation time in epoch seconds (to tell
    unknown, 404, from not ready, 503), and the ready replicas with the URL
    of their rank-0 shard, the one that serves."""
    models = {
        name: int(created.timestamp())
        for name, created in Model.objects.values_list("name", "created_at")
    }
    rows = (
        # A node that stopped reporting is not routed to from the moment it
        # is NotReady, before the reconciler marks its replicas lost.
        Shard.objects.filter(rank=0, replica__state=ReplicaState.READY, node__state=NodeState.READY)
        .exclude(url="")
        .values_list("replica_id", "replica__model__name", "url", "replica__profile__engine")
    )
    routes = tuple(Route(rid, model, url.rstrip("/"), engine) for rid, model, url, engine in rows)
    return models, routes


def load_routes_now() -> tuple[dict[str, int], tuple[Route, ...]]:
    close_old_connections()
    return load_routes()


# A replica in these states may yet become ready: a request may wait for it.
_COMING = (ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.LOADING)


def load_coming() -> frozenset[str]:
    """The models a ready replica may come to: held by the catalog (always
    or under load, which the gateway's own queue can trigger), or with a
    replica on its way. A request for any other model with no ready replica
    is answered 503 at once: nothing would come of its waiting."""
    held = Model.objects.filter(Q(always_running__gt=0) | Q(under_load__gt=0))
    placed = Model.objects.filter(replicas__state__in=_COMING)
    names = held.values_list("name", flat=True).union(placed.values_list("name", flat=True))
    return frozenset(names)


def touch_keys(ids: Iterable[int], older_than_s: float = 60.0) -> int:
    """last_used_at, written at most once a minute per key: a busy key must
    not turn every request into an UPDATE."""
    now = timezone.now()
    stale = now - timedelta(seconds=older_than_s)
    touched: int = (
        ApiKey.objects.filter(pk__in=list(ids))
        .exclude(last_used_at__gt=stale)
        .update(last_used_at=now)
    )
    return touched


def close() -> None:
    connections.close_all()
