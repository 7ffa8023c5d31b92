"""A node's report of subnet managers is its own observation: it cannot
rewrite what other nodes observe, nor the fabric's records on its own."""

from __future__ import annotations

from typing import Any

import pytest

from tests.payloads import heartbeat, managers_report, registration

pytestmark = pytest.mark.django_db

MASTER, STANDBY, FAKE = "0x0000000000100001", "0x0000000000100003", "0x0000000000100002"


def sm(guid: str, state: str, priority: int, lid: int) -> dict[str, Any]:
    return {"guid": guid, "lid": lid, "priority": priority, "state": state}


def report(agent: Any, name: str, master: str, managers: list[dict[str, Any]]) -> None:
    payload = heartbeat(name, **managers_report(master, managers))
    assert agent.post("heartbeat", payload).status_code == 200


@pytest.fixture
def nodes(make_node, agent_client):
    agents = {}
    for name in ("gpu-a", "gpu-b"):
        _, credential = make_node(name)
        agents[name] = agent_client(credential)
        assert agents[name].post("register", registration(name)).status_code == 200
    return agents


def fabric(api: Any) -> dict[str, Any]:
    [only] = api.get("/api/v1/fabrics").json()["fabrics"]
    return only


def test_one_node_cannot_rewrite_the_subnet_managers_others_observe(nodes, api):
    honest = [sm(MASTER, "MASTER", 10, 1), sm(STANDBY, "STANDBY", 5, 3)]
    report(nodes["gpu-b"], "gpu-b", MASTER, honest)
    before = fabric(api)
    assert {m["guid"]: m["state"] for m in before["subnet_managers"]} == {
        MASTER: "MASTER",
        STANDBY: "STANDBY",
    }

    # gpu-a says the master is a manager of its own making, demotes the real
    # one and leaves the standby out (which used to mark it GONE).
    report(nodes["gpu-a"], "gpu-a", FAKE, [sm(FAKE, "MASTER", 15, 9), sm(MASTER, "STANDBY", 0, 1)])

    after = fabric(api)
    assert after["master"] == {"guid": MASTER, "priority": 10}
    assert after["master_changes"] == []
    states = {m["guid"]: m["state"] for m in after["subnet_managers"]}
    assert (states[MASTER], states[STANDBY]) == ("MASTER", "STANDBY")
    assert states.get(FAKE) in (None, "GONE"), "one node's word alone is not the fabric's"
    # Its own port does disagree on the master, and may say so; the rest stands.
    codes = {p["code"] for p in after["problems"]}
    assert not codes & {"no_standby", "recent_failover"}, codes

    from llmgw.fabrics.models import ManagerObservation

    seen_by_b = {
        (o.guid, o.state, o.priority, o.master)
        for o in ManagerObservation.objects.filter(node__name="gpu-b")
    }
    assert seen_by_b == {(MASTER, "MASTER", 10, True), (STANDBY, "STANDBY", 5, False)}


def test_one_node_alone_cannot_fail_a_fabric_over(nodes, api):
    """A real failover, seen by both nodes, is recorded once both say so."""
    report(
        nodes["gpu-a"], "gpu-a", MASTER, [sm(MASTER, "MASTER", 10, 1), sm(STANDBY, "STANDBY", 5, 3)]
    )
    report(
        nodes["gpu-b"], "gpu-b", MASTER, [sm(MASTER, "MASTER", 10, 1), sm(STANDBY, "STANDBY", 5, 3)]
    )
    survivor = [sm(STANDBY, "MASTER", 5, 3)]
    report(nodes["gpu-a"], "gpu-a", STANDBY, survivor)
    assert fabric(api)["master"]["guid"] == MASTER  # one of two: not yet
    report(nodes["gpu-b"], "gpu-b", STANDBY, survivor)
    after = fabric(api)
    assert after["identity"] == MASTER  # the name survives the failover
    assert after["master"]["guid"] == STANDBY
    assert [(c["from"], c["to"], c["reported_by"]) for c in after["master_changes"]] == [
        (MASTER, STANDBY, "gpu-b")
    ]
    states = {m["guid"]: m["state"] for m in after["subnet_managers"]}
    assert states == {MASTER: "GONE", STANDBY: "MASTER"}
