"""The facility on the demo fleet, in-process: the simulated nodes (racks,
PDUs, rows, GPU and RAPL power readings) join through the agent API, the
example catalog is applied whole (its facility.budgets included), and the
reconciler places, drains and refuses as an operator would see it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from llmgw.catalog.models import Model
from llmgw.facility import services as facility
from llmgw.facility.models import Hold
from llmgw.serving import placing, reconciler
from llmgw.serving import services as serving
from llmgw.serving.choices import ReplicaState
from llmgw.serving.models import Replica
from llmgw.simulator.fleet import make_fleet

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "server.example.yaml"
MODEL = "qwen2.5-7b-instruct"


class Fleet:
    def __init__(self, make_node: Any, agent_client: Any) -> None:
        self.sims = {s.name: s for s in make_fleet(12, nvl72_trays=0)}
        self.agents = {}
        for name, sim in self.sims.items():
            _, credential = make_node(name)
            self.agents[name] = agent_client(credential)
            response = self.agents[name].post("register", msgspec.to_builtins(sim.registration(10)))
            assert response.status_code == 200, response.content

    def beat(self, ready: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        """Two heartbeats from every node: the first learns its desired
        shards, the second reports them, those of `ready` replicas ready."""
        for _ in range(2):
            self._beat(ready)

    def _beat(self, ready: set[int]) -> None:
        for name, sim in self.sims.items():
            payload = msgspec.to_builtins(sim.heartbeat())
            for shard in payload.get("shards") or []:
                if shard["replica"] in ready:
                    shard.update(state="ready", message="")
            response = self.agents[name].post("heartbeat", payload)
            assert response.status_code == 200, response.content
            sim.desired = response.json().get("desired")


@pytest.fixture
def fleet(make_node: Any, agent_client: Any, django_capture_on_commit_callbacks: Any) -> Fleet:
    fleet = Fleet(make_node, agent_client)
    # Nodes are told the catalog's engines once it commits.
    with django_capture_on_commit_callbacks(execute=True):
        serving.apply_catalog(EXAMPLE)
    fleet.beat()  # the engines the catalog names are installed now
    return fleet


def racks() -> dict[int, str]:
    out = {}
    for r in Replica.objects.filter(model__name=MODEL).prefetch_related("shards__node"):
        [shard] = r.shards.all()
        out[r.pk] = shard.node.labels["llmgw.io/rack"]
    return out


def live() -> list[int]:
    gone = (ReplicaState.FAILED, ReplicaState.LOST)
    return list(
        Replica.objects.filter(model__name=MODEL)
        .exclude(state__in=gone)
        .values_list("pk", flat=True)
    )


@pytest.mark.django_db
def test_three_replicas_of_a_held_model_sit_in_three_racks(fleet: Fleet, api: Any) -> None:
    Model.objects.filter(name=MODEL).update(always_running=3)
    reconciler.reconcile_all()
    assert sorted(racks().values()) == ["r01", "r02", "r03"]
    # The held-model page's rows: where each replica sits in the facility tree.
    replicas = api.get(f"/api/v1/models/{MODEL}").json()["replicas"]
    where = sorted(n["location"] for r in replicas for n in r["nodes"])
    assert where == [
        "-/hall1/row01/r01:r01-pdu0",
        "-/hall1/row01/r02:r02-pdu1",
        "-/hall1/row02/r03:r03-pdu0",
    ]


@pytest.mark.django_db
def test_a_budget_refuses_with_the_three_numbers(fleet: Fleet) -> None:
    replica, result = placing.place_replica(MODEL)
    assert replica is not None
    [refusal] = [r for r in result.explanation.rejections if r.node == "sim-h100-04"]
    assert refusal.reason_code == "power_cap"
    text = refusal.message
    # The cards on the PDU (8 x 400 W and 8 x 700 W) may draw 8.8 kW; measured
    # is whatever the simulated cards and CPU packages drew last.
    assert text.startswith("sim-h100-04 is in pdu r01-pdu1, which is at 8.8 kW of its 8.0 kW cap (")
    assert " kW measured, 8.8 kW derived, declared unknown); " in text
    assert text.endswith("this shard adds 0.7 kW declared")
    shown = "\n".join(serving_explain_lines())
    assert "sim-h100-04 is in pdu r01-pdu1" in shown
    # Where the replica went, in the facility tree.
    [shard] = replica.shards.select_related("node")
    rack = shard.node.labels["llmgw.io/rack"]
    assert f"  {shard.node.name} (-/hall1/row0" in shown and f"/{rack}:{rack}-pdu" in shown


def serving_explain_lines() -> list[str]:
    return placing.explain(MODEL)["lines"]


@pytest.mark.django_db
def test_holding_a_rack_with_drain_moves_its_replicas_out_one_at_a_time(fleet: Fleet) -> None:
    Model.objects.filter(name=MODEL).update(always_running=3)
    reconciler.reconcile_all()
    before = racks()
    fleet.beat(ready=set(before))
    assert set(Replica.objects.values_list("state", flat=True)) == {ReplicaState.READY}
    facility.hold("rack=r01", "PDU swap", drain=True, actor="ops")
    [old] = [pk for pk, rack in before.items() if rack == "r01"]

    reconciler.reconcile_all()
    hold = Hold.objects.get()
    new = hold.moving["new"]
    assert hold.moving == {"model": MODEL, "old": old, "new": new}
    assert racks()[new] != "r01"
    # Placed, not ready: the old one still serves, and nothing more is placed.
    reconciler.reconcile_all()
    assert set(live()) == set(before) | {new}
    hold.refresh_from_db()
    assert hold.progress == (
        f"waiting for {MODEL} replica #{new} to be ready (it is pending) before "
        f"releasing #{old} in rack r01"
    )
    fleet.beat(ready=set(before) | {new})
    reconciler.reconcile_all()
    hold.refresh_from_db()
    assert old not in live() and len(live()) == 3
    assert "r01" not in racks().values()
    assert hold.progress.startswith(f"moved {MODEL} replica #{old} out of rack r01")
    reconciler.reconcile_all()
    hold.refresh_from_db()
    assert hold.progress == "drained: nothing runs in rack r01"
    assert len(live()) == 3
