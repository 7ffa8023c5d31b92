"""What-if's answer is what really happens: on random stored fleets, fail a
random rack, PDU or node; then do it for real (cordon the domain's nodes,
mark the replicas on them lost, as a NotReady node's are, and run the
reconciler) and compare. Every replica the what-if re-placed is placed on
the same nodes and GPUs, in the same order, and one it could not place is
not placed."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.inventory import services as inventory
from llmgw.serving import reconciler
from llmgw.serving import whatif as service
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica, Shard
from tests.whatif.stored import add_node, catalog_text

pytestmark = pytest.mark.django_db


class Rollback(Exception):
    pass


nodes_st = st.lists(
    st.tuples(
        st.sampled_from([0, 4, 8]),
        st.sampled_from(["r1", "r2", "r3"]),
        st.sampled_from(["p1", "p2"]),
        st.sampled_from([64, 512]),
    ),
    min_size=2,
    max_size=6,
)
models_st = st.lists(
    st.tuples(st.integers(1, 3), st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from([8, 48, 200])),
    min_size=1,
    max_size=3,
)


def placed(model: str, after: int) -> list[tuple[list[str], list[list[int]]]]:
    out = []
    for r in Replica.objects.filter(model__name=model, pk__gt=after).order_by("pk"):
        shards = list(Shard.objects.filter(replica=r).order_by("rank").select_related("node"))
        out.append(([s.node.name for s in shards], [list(s.gpu_indices) for s in shards]))
    return out


def run_example(data: Any, make_node: Any, agent_client: Any) -> None:
    nodes = data.draw(nodes_st)
    for i, (gpu_count, rack, pdu, memory) in enumerate(nodes):
        add_node(
            make_node,
            agent_client,
            f"n{i}",
            rack=rack,
            pdu=pdu,
            gpu_count=gpu_count,
            memory_gb=memory,
        )
    specs = [(f"m{i}", *spec) for i, spec in enumerate(data.draw(models_st))]
    catalog.apply_text(catalog_text(specs))
    reconciler.reconcile_all()
    # Held at what fitted, so the reconciler replaces what is lost and no more.
    for m in Model.objects.all():
        Model.objects.filter(pk=m.pk).update(always_running=m.replicas.count())
    domains = sorted({f"rack={r}" for _, r, _, _ in nodes} | {f"pdu={p}" for _, _, p, _ in nodes})
    domain = data.draw(st.sampled_from(domains + [f"n{i}" for i in range(len(nodes))]))

    answer = service.fail(domain)
    replaced = sum(1 for e in answer["lost"] if e["replaced"])
    event(f"lost {min(len(answer['lost']), 3)}+, re-placed {min(replaced, 2)}+")
    event("a model left short" if answer["below"] else "every model kept")

    last = Replica.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    for name in answer["nodes"]:
        inventory.cordon(name, "what-if check", "test")
    lost = [e["replica"] for e in answer["lost"]]
    Shard.objects.filter(replica_id__in=lost, node__name__in=answer["nodes"]).update(
        state=ReplicaState.LOST
    )
    Replica.objects.filter(pk__in=lost).update(state=ReplicaState.LOST)
    reconciler.reconcile_all()

    expected: dict[str, list[tuple[list[str], list[list[int]]]]] = {}
    for e in answer["lost"]:
        if e["replaced"]:
            shards = e["decision"]["shards"]
            expected.setdefault(e["model"], []).append(
                ([s["node"] for s in shards], [s["gpus"] for s in shards])
            )
    for model, *_ in specs:
        assert placed(model, last) == expected.get(model, []), (domain, answer["lines"])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_what_if_equals_the_real_placement_after_the_domain_fails(data, make_node, agent_client):
    try:
        with transaction.atomic():
            run_example(data, make_node, agent_client)
            raise Rollback
    except Rollback:
        pass
