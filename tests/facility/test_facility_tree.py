"""The facility listing as a tree: each domain names the deepest site, room,
row or rack that holds all its nodes (a PDU under the rack it feeds, or
higher when it feeds two), and says which figure each node's draw is
(measured, the cards' limits, or its profiles' estimate). And the console's
facility page, whose hold and release controls are an operator's only."""

from __future__ import annotations

from typing import Any

import pytest

from llmgw.facility import services
from llmgw.inventory import services as inventory
from tests.facility.test_holds_and_budgets import nodes  # noqa: F401
from tests.payloads import heartbeat


def rows() -> dict[str, dict[str, Any]]:
    return {r["domain"]: r for r in services.overview()["domains"]}


@pytest.mark.django_db
def test_each_domain_names_its_parent_in_the_tree(nodes: Any) -> None:  # noqa: F811
    # n1 and n2: room m1, row w1, rack r01, PDUs p1 and p2; n3: rack r02, no PDU.
    services.hold("n3", "disk", False, "ops")
    parents = {key: row["parent"] for key, row in rows().items()}
    assert parents == {
        "room=m1": None,  # no node names a site: the top, not "-"
        "row=w1": "room=m1",
        "rack=r01": "row=w1",
        "rack=r02": "row=w1",
        "pdu=p1": "rack=r01",
        "pdu=p2": "rack=r01",
        "n3": "rack=r02",  # a held node, under its rack
    }
    # A PDU feeding two racks sits under what holds both, not under either.
    inventory.set_labels("n3", {"llmgw.io/pdu": "p2"}, "ops")
    assert rows()["pdu=p2"]["parent"] == "row=w1"
    # Nodes that disagree above it: the domain is at the top.
    inventory.set_labels("n3", {"llmgw.io/room": "m2"}, "ops")
    listed = rows()
    assert listed["row=w1"]["parent"] is None and listed["room=m2"]["parent"] is None
    assert listed["rack=r01"]["parent"] == "row=w1"


@pytest.mark.django_db
def test_each_domain_says_which_figure_its_nodes_draw_is(nodes: Any) -> None:  # noqa: F811
    # n1: cards limited to 1.4 kW, drawing 730 W: its draw is the limits.
    # n2: cards limited to 600 W, drawing 540 W and 100 W of CPU: measured.
    samples = [
        {"index": 0, "power_draw_w": 250.0, "power_limit_w": 300.0},
        {"index": 1, "power_draw_w": 290.0, "power_limit_w": 300.0},
    ]
    sensors = {"cpu_packages": [{"package": 0, "power_w": 100.0}]}
    nodes["n2"].post("heartbeat", heartbeat("n2", gpus=samples, sensors=sensors))
    listed = rows()
    assert listed["rack=r01"]["draw_from"] == {"measured": 1, "derived": 1, "declared": 0}
    assert listed["rack=r01"]["draw_w"] == 1400.0 + 640.0
    assert listed["pdu=p1"]["draw_from"] == {"measured": 0, "derived": 1, "declared": 0}
    # n3 reports nothing: counted unknown, under no source.
    assert listed["rack=r02"]["draw_from"] == {"measured": 0, "derived": 0, "declared": 0}
    assert listed["rack=r02"]["unknown_nodes"] == 1


@pytest.mark.django_db
def test_the_api_carries_parent_and_source(nodes: Any, api: Any) -> None:  # noqa: F811
    listing = api.get("/api/v1/facility").json()
    rack = {r["domain"]: r for r in listing["domains"]}["rack=r01"]
    assert rack["parent"] == "row=w1"
    assert rack["draw_from"] == {"measured": 0, "derived": 1, "declared": 0}


@pytest.mark.django_db
def test_the_facility_page_has_hold_controls_for_operators_only(client: Any, operator: Any) -> None:
    from django.contrib.auth.models import User

    from llmgw.accounts import roles

    client.force_login(operator)
    page = client.get("/facility").content.decode()
    assert 'id="hold-controls"' in page and 'id="release-control"' in page
    assert 'value="rack" checked' in page and 'value="site">' in page

    viewer = User.objects.create_user("viewer", password="a-long-test-password")
    roles.grant(viewer, roles.VIEWER)
    client.force_login(viewer)
    page = client.get("/facility").content.decode()
    assert client.get("/facility").status_code == 200
    assert "hold-controls" not in page and "release-control" not in page
    assert "Run the what-if sweep" in page  # a dry run is a viewer's too

    roles.grant(viewer, None)
    assert client.get("/facility").status_code == 403


ODD_READINGS = [
    # (gpu_telemetry, sensors): what agents old and new have left stored.
    ([{"index": 0, "power_limit_w": 700, "power_draw_w": 312.5}], {"cpu_packages": []}),
    ([{"index": 0, "power_limit_w": True, "power_draw_w": "310"}], None),
    ([{"index": 0}, "junk", [1, 2]], {"cpu_packages": [{"package": 0, "power_w": 95}]}),
    (None, {"cpu_packages": "none"}),
    ({"not": "a list"}, ["not", "a mapping"]),
    ([], {"cpu_packages": [{"power_w": None}, {"power_w": 80.5}, 7]}),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("telemetry", "sensors"), ODD_READINGS)
def test_the_listing_sums_power_as_the_placement_reads_it(
    nodes: Any,  # noqa: F811
    telemetry: Any,
    sensors: Any,
) -> None:
    from llmgw.facility import power
    from llmgw.inventory.models import Node

    Node.objects.filter(name="n3").update(gpu_telemetry=telemetry, sensors=sensors)
    services.hold("n3", "watch it", False, "ops")
    row = rows()["n3"]
    derived = power.derived(telemetry if isinstance(telemetry, list) else None)
    measured = power.measured(
        telemetry if isinstance(telemetry, list) else None,
        sensors if isinstance(sensors, dict) else None,
    )
    assert (row["derived_w"], row["measured_w"]) == (derived, measured)
    assert row["unknown_nodes"] == (derived is None and measured is None)
