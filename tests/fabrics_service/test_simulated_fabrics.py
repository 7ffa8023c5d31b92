"""The simulated fleet's fabrics: the map each simulated node answers with
parses and analyses into what it was built with, its ports and subnet
managers go through the real agent API into /api/v1/fabrics, and a cable
changed with `llmgw simulate-event` shows on the next beat and map."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET

from llmgw.cli.simulate import Cables, handlers
from llmgw.fabrics.ibnetdiscover import ParseError, parse
from llmgw.fabrics.topology import analyze
from llmgw.simulator import fabrics
from llmgw.simulator.fleet import SimNode, make_fleet

BUILT = {
    # fabric: (leaf, spine, core), the short cable's ends and rate, the miswired adapter
    "ib-a": ((16, 8, 4), ("sim-h100-04 mlx5_3", "ib-a-leaf-r3-g0", "2xNDR"), ("dgx-a-021", "mlx5_5")),
    "ib-b": ((16, 4, 0), ("ib-b-leaf-r0-g2", "ib-b-spine-02", "2xHDR"), ("sim-a100-09", "mlx5_2")),
    "ib-c": ((16, 4, 0), ("gb200-c-030 mlx5_1", "ib-c-leaf-r1-g2", "2xNDR"), ("gb200-c-041", "mlx5_0")),
}  # fmt: skip


@pytest.fixture(scope="module")
def fleet() -> list[SimNode]:
    return make_fleet(12, nvl72_trays=18)


def first_on(fleet: list[SimNode], name: str) -> SimNode:
    return next(n for n in fleet if n.ib is not None and n.ib.name == name)


@pytest.mark.parametrize("name", sorted(BUILT))
def test_each_simulated_fabric_maps_to_what_it_was_built_with(
    fleet: list[SimNode], name: str
) -> None:
    node = first_on(fleet, name)
    text = handlers(node)["ibnetdiscover"](None, {"device": "mlx5_0", "port": 1})  # type: ignore[arg-type]
    a = analyze(parse(text))
    tiers, short, miswired = BUILT[name]
    s = a["summary"]
    assert (s["leaf"], s["spine"], s["core"]) == tiers
    assert 240 <= s["host_adapters"] <= 260 and s["unknown_tier"] == 0
    [d] = a["degraded_links"]
    assert (d["a"]["description"], d["b"]["description"], d["rate_text"]) == short
    [m] = a["rail_misalignment"]
    assert (m["node"], m["device"]) == miswired
    # The simulated nodes' adapters carry their names and the GUIDs their ports report.
    ports = {p.device: p for p in node.heartbeat().ports}
    mine = {ad["device"]: ad for ad in a["adapters"] if ad["node"] == node.name}
    assert set(mine) == set(ports) == {f"mlx5_{r}" for r in range(node.shape.adapters)}
    for device, ad in mine.items():
        assert ad["guid"] == ad["port_guids"]["1"] == ports[device].port_guid


def test_ports_and_managers_follow_the_agent_protocol(fleet: list[SimNode]) -> None:
    node = make_fleet(12, nvl72_trays=0)[0]
    clock = {"now": 100.0}
    node.clock = lambda: clock["now"]
    first = node.heartbeat()
    assert first.fabrics_changed is True and first.fabrics_active == ["ib-a"]
    [listing] = first.subnet_managers
    assert [m.state for m in listing.managers] == ["MASTER", "STANDBY"]
    assert listing.master == listing.managers[0].guid == first.ports[0].sm.guid
    clock["now"] += 10
    second = node.heartbeat()
    assert second.fabrics_changed is UNSET and second.subnet_managers is UNSET
    # Counters are running totals that advance with load, at most at the link's rate.
    for before, after in zip(first.ports, second.ports, strict=True):
        sent = after.counters["port_xmit_data"] - before.counters["port_xmit_data"]
        assert 0 < sent <= after.rate_gbps * 1e9 / 8 * 10
    clock["now"] += 60
    assert node.heartbeat().subnet_managers is not UNSET  # once a minute
    # ib-b has no standby.
    b = first_on(make_fleet(12, nvl72_trays=0), "ib-b")
    [listing] = b.heartbeat().subnet_managers
    assert [m.state for m in listing.managers] == ["MASTER"]


def test_a_cable_changed_live(tmp_path: Path, settings: Any) -> None:
    settings.DATA_DIR = str(tmp_path)
    fleet = make_fleet(12, nvl72_trays=0)
    node = fleet[0]
    cables = Cables(fleet)
    cables.poll()
    node.heartbeat()
    path = fabrics.cables_file(tmp_path)
    fabrics.write_event(path, "cable-down", node.name, ["mlx5_2"])
    fabrics.write_event(path, "cable-short", node.name, ["mlx5_5"])
    cables.poll()
    ports = {p.device: p for p in node.heartbeat().ports}
    assert (ports["mlx5_2"].state, ports["mlx5_2"].phys_state) == ("DOWN", "Polling")
    assert ports["mlx5_2"].sm is None and ports["mlx5_2"].counters["link_downed"] == 1
    assert (ports["mlx5_5"].rate_gbps, ports["mlx5_5"].rate_text) == (200.0, "2X NDR")
    a = analyze(parse(node.ib.discover(node.name, "mlx5_0")))  # type: ignore[union-attr]
    assert not [ad for ad in a["adapters"] if ad["description"] == f"{node.name} mlx5_2"]
    short = {(d["a"]["description"], d["rate_text"]) for d in a["degraded_links"]}
    assert (f"{node.name} mlx5_5", "2xNDR") in short
    # Asked through the adapter whose cable is out: the real tool's failed discovery.
    with pytest.raises(ParseError, match="no connected port"):
        parse(node.ib.discover(node.name, "mlx5_2"))  # type: ignore[union-attr]
    # All of them out: the node leaves the fabric, and says so once.
    fabrics.write_event(path, "cable-down", node.name, [f"mlx5_{r}" for r in range(8)])
    cables.poll()
    beat = node.heartbeat()
    assert beat.fabrics_changed is True and beat.fabrics_active == []
    assert beat.subnet_managers == []
    fabrics.write_event(path, "reset")
    cables.poll()
    assert node.heartbeat().fabrics_active == ["ib-a"]


def test_the_simulated_fabrics_show_in_the_api_with_their_managers(
    live_server: Any, api: Any
) -> None:
    from llmgw.cli.simulate import run as simulate

    assert simulate(live_server.url, 12, 10, "sim", True, nvl72_trays=18) == 0
    data = api.get("/api/v1/fabrics").json()
    ib = {f["names"][0]: f for f in data["fabrics"] if f["kind"] == "infiniband"}
    assert set(ib) == {"ib-a", "ib-b", "ib-c"}
    fleet = make_fleet(12, nvl72_trays=18)
    for name, fabric in ib.items():
        sim = first_on(fleet, name).ib
        assert sim is not None
        listed = sim.listing()
        assert fabric["identity"] == min(m["guid"] for m in listed)
        assert fabric["master"]["guid"] == listed[0]["guid"]
        assert [(m["guid"], m["state"]) for m in fabric["subnet_managers"]] == [
            (m["guid"], m["state"]) for m in listed
        ]
        assert fabric["nodes"] == sorted(sim.members)
        codes = [p["code"] for p in fabric["problems"]]
        assert codes == (["no_standby"] if name == "ib-b" else [])
