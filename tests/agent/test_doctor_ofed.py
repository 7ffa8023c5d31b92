"""doctor's InfiniBand checks with the real OFED tools and the real OpenSM on ibsim:
ports up without a subnet manager, and a subnet-manager failover the control plane has
not heard of yet, then has.

The lab (ibsim, OpenSM, sysfs written from the real ibstat, tools through the
command_wrapper) is test_ib_ofed's; see its docstring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.doctor import FAIL, OK, WARN, Check, Facts, run_checks
from llmgw_agent.doctor.gather import ControlPlane, read_ib
from llmgw_agent.doctor.ib import NO_SM

from tests.agent.test_ib_ofed import ControlPlane as Server
from tests.agent.test_ib_ofed import Node, master_seen, parse_ibstat, tool, until, write_sysfs
from tests.agent.test_ib_ofed import lab as lab  # noqa: F401 - a fixture
from tests.agent.test_ib_ofed import pytestmark as pytestmark  # skipped without ibsim
from tests.agent.test_ib_ofed import scratch_cwd as scratch_cwd  # noqa: F401 - a fixture


def doctor(node: Node, record: dict[str, Any] | None = None) -> dict[str, Check]:
    """Every check, on the node as the real tools see it now."""
    write_sysfs(node.sys, node.ibstat())
    facts = Facts(node="node003")
    read_ib(node.roots, facts)
    if record is not None:
        facts.cp = ControlPlane(status=200, record=record)
    return {c.name: c for c in run_checks(facts)}


def test_ports_init_without_a_subnet_manager(lab: dict[str, Any], tmp_path: Path) -> None:
    sim = lab["sim"]()
    checks = doctor(Node(sim, "node001 mlx5_0", tmp_path), {"ports": [], "fabrics": []})
    ports = checks["ib ports"]
    assert ports.result == FAIL and "ibsim0/1 LinkUp but INIT" in ports.detail
    # The record given has no ports: the control plane has not heard of this one.
    assert "the control plane has no record of ibsim0/1" in ports.detail
    assert ports.action.split("; ")[0] == NO_SM
    sm = checks["subnet manager"]
    assert sm.result == FAIL and "no subnet manager answers on ibsim0/1" in sm.detail
    assert "opensm" in sm.action
    names = checks["fabric names"]
    assert names.result == WARN and "ib-a: no port with a subnet manager" in names.detail


@pytest.mark.flaky(reruns=3)
def test_after_a_failover_doctor_names_the_new_master_and_the_record_catches_up(
    lab: dict[str, Any], tmp_path: Path, make_node: Any, agent_client: Any, client: Any
) -> None:
    server = Server(make_node, agent_client, "node003")

    def record() -> dict[str, Any]:
        got = client.get(
            "/api/agent/v1/record", HTTP_AUTHORIZATION=f"Node {server.agent.credential}"
        )
        assert got.status_code == 200
        answer: dict[str, Any] = got.json()
        return answer

    sim = lab["sim"]()
    guid = {h: parse_ibstat(tool(sim, "ibstat", host=f"{h} mlx5_0").stdout)[0].port_guid
            for h in ("node001", "node002")}  # fmt: skip
    master = lab["sm"](sim, "node001 mlx5_0", 10)
    until("OpenSM MASTER", lambda: master_seen(sim, "node003 mlx5_0"), 30)
    lab["sm"](sim, "node002 mlx5_0", 5)
    node = Node(sim, "node003 mlx5_0", tmp_path)
    server.post(node.heartbeat())

    before = doctor(node, record())
    assert before["ib ports"].result == OK
    sm = before["subnet manager"]
    assert sm.result == OK, sm
    assert f"ibsim0/1 see master {guid['node001']} (lid" in sm.detail
    assert "priority 10, MASTER" in sm.detail and "record agrees" in sm.detail
    assert before["fabric names"].result == OK

    master.stop()
    until(
        "the standby taking over",
        lambda: (m := master_seen(sim, "node003 mlx5_0")) and m["guid"] == guid["node002"] and m,
        60,
    )
    # The control plane has not heard yet: doctor says which SM and that the record differs.
    stale = doctor(node, record())
    sm = stale["subnet manager"]
    assert sm.result == WARN
    assert f"ibsim0/1 see master {guid['node002']} (lid" in sm.detail and "priority 5" in sm.detail
    assert f"ibsim0/1 recorded {guid['node001']}, sees {guid['node002']}" in sm.detail
    assert "llmgw-agent" in sm.action

    server.post(node.heartbeat())
    caught_up = doctor(node, record())["subnet manager"]
    assert caught_up.result == OK and "record agrees" in caught_up.detail
