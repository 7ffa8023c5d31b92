"""Held models and what serves them: replicas each model is held at, what
the reconciler is aiming for, and replicas and shards by state.

Counts come from the database, where a zero is known, so every catalogued
model has a sample for every state. The reconciler's target is absent for a
model it has not yet worked on.
"""

from __future__ import annotations

from collections import Counter

from llmgw.catalog.models import Model
from llmgw.metrics.text import Family
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import HeldState, Replica, Shard


def families() -> list[Family]:
    always = Family(
        "llmgw_model_replicas_always_running",
        "Replicas the model is held at whatever the load",
        ["model"],
    )
    under_load = Family(
        "llmgw_model_replicas_under_load",
        "Replicas the model may grow to while its queue is loaded",
        ["model"],
    )
    target = Family(
        "llmgw_model_replicas_target",
        "Replicas the reconciler is keeping the model at now",
        ["model"],
    )
    replicas = Family("llmgw_model_replicas", "Replicas by state", ["model", "state"])
    shards = Family("llmgw_model_shards", "Shards by state", ["model", "state"])
    names = list(Model.objects.values_list("name", "always_running", "under_load"))
    for name, held, loaded in names:
        always.add_metric([name], held)
        under_load.add_metric([name], loaded)
    for name, value in HeldState.objects.values_list("model__name", "target"):
        target.add_metric([name], value)
    by_replica = Counter(Replica.objects.values_list("model__name", "state"))
    by_shard = Counter(Shard.objects.values_list("replica__model__name", "state"))
    for name, _, _ in names:
        for state in ReplicaState.values:
            replicas.add_metric([name, state], by_replica.get((name, state), 0))
            shards.add_metric([name, state], by_shard.get((name, state), 0))
    return [always, under_load, target, replicas, shards]
