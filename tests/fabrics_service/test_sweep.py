"""The fabric sweep end to end: the control plane under uvicorn asks a node
for its fabric's map over the agent's real command stream; the agent's real
ibnetdiscover handler runs the REAL ibnetdiscover against ibsim (through
command_wrapper `env IBSIM_SOCKNAME=.. SIM_HOST=.. ibsim-run`, as a wrapper
is used on a node); the server parses the answer into the fabric's map.

Under ibsim every adapter is CA "ibsim0", which is what the node's port
reports, so the command's `-C ibsim0 -P 1` is the port the sweep chose. The
ports are sent as ACTIVE with their real GUIDs from `ibstat` but without an
OpenSM (ibnetdiscover needs none; tests/agent/test_ib_ofed.py covers the
subnet manager path). Skipped only when ibsim is missing.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from llmgw_agent.collectors import Roots, make_runner
from llmgw_agent.collectors.ib import parse_ibstat
from llmgw_agent.stream import Stream

from llmgw.fabrics import sweep
from llmgw.fabrics.models import FabricMap, PhysicalFabric
from llmgw.inventory import commands
from llmgw.inventory.models import AgentCommand, Node
from llmgw.placement.snapshot import node_views
from tests.fabrics.data import NDR_BAD
from tests.fabrics.ibsim import Simulator, ibsim_tree, miswired, tiers, write_net
from tests.fabrics_service.queued import run_queued_maps
from tests.payloads import heartbeat, registration

pytestmark = [
    pytest.mark.ofed,
    pytest.mark.skipif(shutil.which("ibsim") is None, reason="ibsim not installed"),
]

SM = "0x0000000000abcd01"


def ports_of(sim: Simulator, host: str) -> list[dict[str, Any]]:
    """The node's port as the agent reports it, GUIDs from the real ibstat."""
    (p,) = parse_ibstat(sim.run("ibstat", host=host))
    return [
        {
            "device": p.device,
            "port": p.port,
            "link_layer": "InfiniBand",
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate_gbps": 200,
            "rate_text": "4X HDR",
            "node_guid": p.node_guid,
            "port_guid": p.port_guid,
            "counters": {},
            "fabric": "ib-a",
            "sm": {"guid": SM, "lid": 1, "priority": 10, "state": "MASTER"},
        }
    ]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Simulator, Any]]:
    net = ibsim_tree()
    sim = Simulator(write_net(net, tmp_path / "fat-tree.net"), tmp_path)
    # ibsim-run drops ./sys-<pid> where it runs; the agent's runner has no cwd of its own.
    monkeypatch.chdir(tmp_path)
    sim.start()
    try:
        yield sim, net
    finally:
        sim.stop()


def join(make_node: Any, agent_client: Any, sim: Simulator, name: str) -> tuple[Node, str]:
    node, credential = make_node(name)
    agent = agent_client(credential)
    fabrics = [{"name": "ib-a", "adapters": ["ibsim0"]}]
    features = ["heartbeat", "command:ibnetdiscover", "command:ping"]
    assert (
        agent.post("register", registration(name, fabrics=fabrics, features=features)).status_code
        == 200
    )
    beat = heartbeat(name, ports=ports_of(sim, f"{name} mlx5_0"), fabrics_active=["ib-a"])
    beat["fabrics_changed"] = True
    beat["subnet_managers"] = [
        {"port": "ibsim0/1", "master": SM, "managers": [{"guid": SM, "state": "MASTER"}]}
    ]
    assert agent.post("heartbeat", beat).status_code == 200
    return node, credential


def until(what: str, probe: Any, seconds: float = 30) -> Any:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = probe()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {seconds:.0f} s")


def test_the_sweep_maps_the_fabric_through_the_agent_stream(
    lab: tuple[Simulator, Any], asgi_server: str, make_node: Any, agent_client: Any, api: Any
) -> None:
    sim, net = lab
    node1, credential = join(make_node, agent_client, sim, "node001")
    node2, _ = join(make_node, agent_client, sim, "node002")
    fabric = PhysicalFabric.objects.get()
    assert fabric.identity == SM and fabric.kind == "infiniband"

    stop = threading.Event()
    wrapper = ["env", f"IBSIM_SOCKNAME={sim.sockname}", "SIM_HOST=node001 mlx5_0", "ibsim-run"]
    agent = Stream(asgi_server, lambda: credential, Roots(run=make_runner(wrapper)), stop)
    thread = threading.Thread(target=agent.run_forever, daemon=True)
    thread.start()
    try:
        assert sweep.sweep() == {SM: "node001"}  # the first by name; node002 has no stream
        # One request per fabric at a time.
        assert sweep.sweep() == {SM: "a request is still waiting for its answer"}
        command = AgentCommand.objects.get(kind="ibnetdiscover")
        assert command.args == {"fabric_id": fabric.pk, "fabric": SM, "device": "ibsim0", "port": 1}
        # The server queued the answer for a worker; this test is the worker.
        fabric_map = until(
            "the map",
            lambda: (
                run_queued_maps()
                and FabricMap.objects.filter(fabric=fabric, analysis__isnull=False).first()
            ),
        )
    finally:
        stop.set()
        thread.join(timeout=5)
    command.refresh_from_db()
    assert command.state == "done" and command.output.startswith("#")
    assert (command.sent_at - command.created_at).total_seconds() < 2

    analysis = fabric_map.analysis
    assert fabric_map.source_node == "node001" and fabric_map.error == ""
    summary = analysis["summary"]
    assert (summary["leaf"], summary["spine"], summary["core"]) == (4, 2, 2)
    assert summary["host_adapters"] == sum(h.adapters for h in net.hosts) == 20
    assert {s["description"]: s["tier"] for s in analysis["switches"]} == tiers(net)
    # The two cables written short (an adapter at EDR, an uplink at 1x), and nothing else.
    found = {
        frozenset((d["a"]["description"], d["b"]["description"])): d["rate_text"]
        for d in analysis["degraded_links"]
    }
    assert found == {
        frozenset(("node004 mlx5_1", "leaf01")): "4xEDR",
        frozenset(("leaf00", "spine01")): "1xHDR",
    }
    [wrong] = analysis["rail_misalignment"]
    [(node, device, plugged_into)] = miswired(net)
    assert (wrong["node"], wrong["device"]) == (node, device)
    leaf_guids = {s["description"]: s["guid"] for s in analysis["switches"]}
    assert wrong["leaf_guid"] == leaf_guids[plugged_into]

    # Placement reads it: node001's leaf is its mlx5_0's, found by its port GUID.
    views = {v.name: v for v in node_views()}
    assert views["node001"].fabric_leaves == {f"ib-a@{SM}": leaf_guids["leaf00"]}
    assert views["node001"].degraded_fabrics == frozenset()

    # The topology the console draws.
    got = api.get(f"/api/v1/fabrics/{fabric.pk}/topology").json()
    assert got["source_node"] == "node001" and got["map"]["summary"] == summary

    # The real failed-discovery dump, answered by node002: refused with its line, map kept.
    bad = NDR_BAD.read_text()
    command = commands.send(node2, "ibnetdiscover", {"fabric_id": fabric.pk})
    assert commands.claim(node2.pk) == [command]
    assert commands.finish(node2.pk, {"id": command.pk, "ok": True, "output": bad}) is not None
    assert run_queued_maps() == [command.pk]
    fabric_map.refresh_from_db()
    assert fabric_map.analysis == analysis and fabric_map.source_node == "node001"
    line = bad.splitlines().index(next(ln for ln in bad.splitlines() if ln.startswith("Ca\t"))) + 1
    assert fabric_map.error_line == line == 11
    assert "node002" in fabric_map.error and "no connected port" in fabric_map.error
    assert fabric_map.error_at is not None
    got = api.get(f"/api/v1/fabrics/{fabric.pk}/topology").json()
    assert got["error_line"] == 11 and got["map"]["summary"] == summary

    # A command that failed on the node is recorded the same way.
    command = commands.send(node2, "ibnetdiscover", {"fabric_id": fabric.pk})
    commands.claim(node2.pk)
    commands.finish(
        node2.pk, {"id": command.pk, "ok": False, "error": "RuntimeError: ibnetdiscover exited 1"}
    )
    assert run_queued_maps() == [command.pk]
    fabric_map.refresh_from_db()
    assert fabric_map.analysis == analysis and fabric_map.error_line is None
    assert (
        "ibnetdiscover on node002 failed: RuntimeError: ibnetdiscover exited 1" in fabric_map.error
    )

    # The next sweep goes to the node that answered, not the one that failed.
    assert sweep.sweep() == {SM: "node001"}


def test_the_sweep_asks_nobody_it_should_not(make_node: Any, agent_client: Any) -> None:
    """No Ready node with an active port whose agent answers ibnetdiscover: nothing is sent."""
    node, credential = make_node("old-agent")
    agent = agent_client(credential)
    fabrics = [{"name": "ib-a", "adapters": ["mlx5_0"]}]
    assert agent.post("register", registration("old-agent", fabrics=fabrics)).status_code == 200
    port = {
        "device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE",
        "phys_state": "LinkUp", "rate_gbps": 400, "rate_text": "4X NDR",
        "node_guid": "0xa088c20300740000", "port_guid": "0xa088c20300740000",
        "counters": {}, "fabric": "ib-a",
        "sm": {"guid": SM, "lid": 1, "priority": 10, "state": "MASTER"},
    }  # fmt: skip
    assert agent.post("heartbeat", heartbeat("old-agent", ports=[port])).status_code == 200
    reason = "no Ready node with an active port answers ibnetdiscover"
    assert sweep.sweep() == {SM: reason}  # no "command:ibnetdiscover" feature
    Node.objects.filter(pk=node.pk).update(features=["command:ibnetdiscover"], cordoned=True)
    assert sweep.sweep() == {SM: reason}
    Node.objects.filter(pk=node.pk).update(cordoned=False)
    with CaptureQueriesContext(connection) as queries:
        assert sweep.sweep() == {SM: "old-agent"}
    assert AgentCommand.objects.get().args["device"] == "mlx5_0"
    # Each port's node without its desired state, telemetry or samples:
    # joined to every port of a 5,000-node fleet, they outran the timeout.
    read = " ".join(q["sql"] for q in queries.captured_queries)
    assert '"inventory_node"."name"' in read
    for column in ("desired", "port_samples", "gpu_telemetry"):
        assert f'"inventory_node"."{column}"' not in read
