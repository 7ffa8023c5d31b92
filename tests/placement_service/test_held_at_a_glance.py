"""A held model at a glance through the model API: ready against the count
it is held at now, a word for where it stands, its last placement; and
explain's reasons grouped by the server, one way for ctl and the console."""

from __future__ import annotations

from llmgw.catalog.models import Model
from llmgw.serving import placing
from llmgw.serving.models import HeldState, Replica
from tests.placement_service.test_placement_api import fleet  # noqa: F401 - a fixture


def held(api, name):
    return api.get(f"/api/v1/models/{name}").json()["held"]


def test_ready_against_target_and_the_word_for_it(fleet, api):  # noqa: F811
    fleet("n64", 64)
    assert held(api, "small-cpu") == {
        "state": "not held",
        "state_means": "no count holds it: nothing keeps a replica running",
        "ready": 0,
        "target": 0,
        "last_placement": None,
    }
    assert (
        api.patch("/api/v1/models/small-cpu", {"always_running": 2}, format="json").status_code
        == 200
    )
    assert held(api, "small-cpu")["state"] == "short"  # counted, none placed yet
    first, _ = placing.place_replica("small-cpu")
    second, _ = placing.place_replica("small-cpu")
    now = held(api, "small-cpu")
    assert (now["state"], now["ready"], now["target"]) == ("starting", 0, 2)
    assert now["last_placement"]["placed"] is True and now["last_placement"]["at"]
    Replica.objects.filter(pk=first.pk).update(state="ready")
    assert (held(api, "small-cpu")["state"], held(api, "small-cpu")["ready"]) == ("starting", 1)
    Replica.objects.filter(pk=second.pk).update(state="failed")
    assert held(api, "small-cpu")["state"] == "short"
    Replica.objects.filter(pk=second.pk).update(state="ready")
    assert held(api, "small-cpu")["state"] == "ready"
    # The list says the same as the model.
    [listed] = [m for m in api.get("/api/v1/models").json() if m["name"] == "small-cpu"]
    assert listed["held"] == held(api, "small-cpu")


def test_under_load_only_is_idle_until_the_reconciler_raises_its_target(fleet, api):  # noqa: F811
    fleet("n64", 64)
    assert (
        api.patch("/api/v1/models/small-cpu", {"under_load": 3}, format="json").status_code == 200
    )
    assert (held(api, "small-cpu")["state"], held(api, "small-cpu")["target"]) == ("idle", 0)
    # Loaded a while: the reconciler holds it at two.
    HeldState.objects.create(model=Model.objects.get(name="small-cpu"), target=2)
    assert (held(api, "small-cpu")["state"], held(api, "small-cpu")["target"]) == ("short", 2)


def test_a_refused_placement_is_the_last_placement(fleet, api):  # noqa: F811
    fleet("n8", 8)
    assert api.post("/api/v1/models/huge-cpu/place").status_code == 409
    assert held(api, "huge-cpu")["last_placement"]["placed"] is False


def test_explain_groups_its_reasons_for_every_reader(fleet, api):  # noqa: F811
    for n in range(5):
        fleet(f"n{n}", 8)
    every = api.get("/api/v1/models/huge-cpu/explain").json()
    few = api.get("/api/v1/models/huge-cpu/explain?nodes=3").json()
    assert every["grouped"] == few["grouped"]
    assert every["heading"] == [
        "huge-cpu: never placed; this is what placement would decide now"
    ] + ["huge-cpu: cannot be placed"]
    [reason] = every["attempts"][0]["reasons"]
    assert (reason["count"], len(reason["nodes"])) == (5, 5)
    assert len(few["attempts"][0]["reasons"][0]["nodes"]) == 3
    assert (
        f"  5 nodes: {reason['summary']} ({reason['code']}): n0, n1, n2 and 2 more"
        in every["grouped"]
    )
    assert (
        every["grouped"][-1] == "every node on a line of its own: llmgw ctl explain huge-cpu --all"
    )
    # A refused count's explanation is grouped the same way.
    refused = api.patch("/api/v1/models/huge-cpu", {"always_running": 1}, format="json").json()
    assert (
        f"  5 nodes: {reason['summary']} ({reason['code']}): n0, n1, n2 and 2 more"
        in (refused["explanation"]["grouped"])
    )
