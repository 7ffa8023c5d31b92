"""What each /metrics target answers.

A fleet's per-node series (its nodes, cards, ports, collectors and shards:
about 470 series for an 8-GPU node) grow with the fleet; the fleet-level
series (fabrics' subnet managers and problems, held models, facility
domains' power, the gateway)
do not. At 5,000 nodes the whole is over a million series, too much for
one answer within a scrape timeout, so the node series are also served in
shards: shard i of N holds the nodes whose id is i modulo N. Prometheus
scrapes the fleet target once and each shard once (docs/metrics.md), and
the work is spread over the web processes. An id never changes, so a
node's series stay in one shard for as long as it exists; when N changes
each node moves at most once.

/metrics without parameters is still the whole fleet in one answer, as a
small fleet is scraped.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db.models import QuerySet
from django.db.models.functions import Mod
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest

from llmgw.inventory.models import Node
from llmgw.metrics import agents, collectors, fabrics, facility, gpus, held, shards
from llmgw.metrics.text import render
from llmgw.serving.gateway.metrics import GatewayCollector
from llmgw.serving.gateway.usage import UsageCollector

MAX_SHARDS = 1024
NODE_SERIES = (
    collectors.families,
    agents.families,
    gpus.families,
    fabrics.port_families,
    shards.families,
)

_gateway = CollectorRegistry(auto_describe=False)
_gateway.register(GatewayCollector())
_gateway.register(UsageCollector())


class BadShard(ValueError):
    pass


def shard_of(query: Mapping[str, str]) -> tuple[int, int] | None:
    """(i, N) from ?shard=i&of=N; None when neither is given (every node)."""
    shard, of = query.get("shard"), query.get("of")
    if shard is None and of is None:
        return None
    if shard is None or of is None:
        raise BadShard("shard and of go together: ?shard=0&of=8")
    try:
        i, n = int(shard), int(of)
    except ValueError:
        raise BadShard(f"shard and of are whole numbers, not {shard!r} and {of!r}") from None
    if not 1 <= n <= MAX_SHARDS:
        raise BadShard(f"of: {n} is not between 1 and {MAX_SHARDS}")
    if not 0 <= i < n:
        raise BadShard(f"shard: {i} is not between 0 and {n - 1} (of={n})")
    return i, n


def scope(shard: tuple[int, int] | None) -> QuerySet[Node]:
    nodes = Node.objects.all()
    if shard is None:
        return nodes
    i, n = shard
    return nodes.alias(metrics_shard=Mod("id", n)).filter(metrics_shard=i)


def node_text(shard: tuple[int, int] | None) -> str:
    now, nodes = timezone.now(), scope(shard)
    return render(f for collect in NODE_SERIES for f in collect(nodes, now))


def fleet_text() -> str:
    families = [*fabrics.fabric_families(), *held.families(), *facility.families()]
    return render(families) + generate_latest(_gateway).decode()


def whole_text() -> str:
    return node_text(None) + fleet_text()
