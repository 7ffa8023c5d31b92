"""Physical fabrics on the control plane, from the agent's real ib and sm
collectors over a sysfs tree rebuilt from a real H100 node, with sminfo and
saquery answering as the real tools did under ibsim."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.collectors import CommandResult, Roots, run_collectors

from llmgw.catalog import services as catalog
from llmgw.fabrics.models import MasterChange, PhysicalFabric
from llmgw.inventory.models import Node
from llmgw.placement import services as placement
from tests.agent.test_sm import SMINFO_IBSIM, SMIR_IBSIM
from tests.payloads import heartbeat, registration
from tests.tokens import make_token

FIXTURE = Path(__file__).parents[1] / "agent" / "fixtures" / "sys-ib-h100" / "sys"
FABRICS = {"ib-a": ("mlx5_0", "mlx5_1")}
MASTER, STANDBY = "0x0000000000100001", "0x0000000000100003"


class Tools:
    """sminfo and saquery as the real ones printed them; switchable."""

    def __init__(self, sminfo: str = SMINFO_IBSIM, smir: str = SMIR_IBSIM) -> None:
        self.sminfo, self.smir = sminfo, smir

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        if argv[0] == "sminfo":
            return CommandResult(0, self.sminfo, "")
        if argv[0] == "saquery":
            return CommandResult(0, self.smir, "")
        return CommandResult(0, "", "")


def other_fabric(text: str) -> str:
    """The same tools' output on an independent fabric: other GUIDs."""
    return (
        text.replace("0x100001", "0x200001")
        .replace("0x0000000000100001", "0x0000000000200001")
        .replace("0x0000000000100003", "0x0000000000200003")
    )


class Node_:
    def __init__(
        self, make_node: Any, agent_client: Any, name: str, tmp: Path, tools: Tools
    ) -> None:
        _, credential = make_node(name)
        self.name, self.agent = name, agent_client(credential)
        shutil.copytree(FIXTURE, tmp / name)
        self.sys = tmp / name
        self.clock = {"now": 1000.0}
        self.roots = Roots(
            sys=self.sys,
            rootfs=tmp / "root",
            run=tools,
            clock=lambda: self.clock["now"],
            fabrics=FABRICS,
        )
        fabrics = [{"name": n, "adapters": list(a)} for n, a in FABRICS.items()]
        assert self.agent.post("register", registration(name, fabrics=fabrics)).status_code == 200

    def beat(self, seconds: float = 61) -> dict[str, Any]:
        self.clock["now"] += seconds
        data, _ = run_collectors(self.roots, part="heartbeat", enabled={"ib": True, "sm": True})
        payload = heartbeat(
            self.name,
            **{
                k: v
                for k, v in data.items()
                if k in ("ports", "fabrics_changed", "fabrics_active", "subnet_managers", "notices")
            },
        )
        answer = self.agent.post("heartbeat", payload)
        assert answer.status_code == 200, answer.content
        return payload

    def pull(self, device: str) -> None:
        port = self.sys / "class" / "infiniband" / device / "ports" / "1"
        (port / "state").write_text("1: DOWN\n")
        (port / "phys_state").write_text("2: Polling\n")


@pytest.fixture
def cluster(make_node, agent_client, tmp_path):
    def node(name: str, tools: Tools | None = None) -> Node_:
        return Node_(make_node, agent_client, name, tmp_path, tools or Tools())

    return node


def test_ports_sharing_a_subnet_manager_are_one_fabric(cluster, api):
    a, b = cluster("gpu-a"), cluster("gpu-b")
    a.beat(), b.beat()
    data = api.get("/api/v1/fabrics").json()
    [fabric] = data["fabrics"]
    assert fabric["identity"] == MASTER and fabric["kind"] == "infiniband"
    assert fabric["names"] == ["ib-a"] and fabric["nodes"] == ["gpu-a", "gpu-b"]
    assert fabric["master"] == {"guid": MASTER, "priority": 10}
    assert {m["guid"]: m["state"] for m in fabric["subnet_managers"]} == {
        MASTER: "MASTER",
        STANDBY: "STANDBY",
    }
    assert fabric["problems"] == []
    # Adapters up but named by no fabric in agent.yaml are warned about.
    assert any(
        w["kind"] == "undeclared_adapter" and w["port"] == "gpu-a:mlx5_4/1"
        for w in data["warnings"]
    )


def test_a_failover_keeps_the_identity_and_records_the_change(cluster, api):
    tools = Tools()
    a = cluster("gpu-a", tools)
    a.beat()
    # The master died: sminfo names the standby, SMIR lists only the survivor.
    tools.sminfo = SMINFO_IBSIM.replace("lid 1 sm guid 0x100001", "lid 3 sm guid 0x100003")
    tools.smir = SMIR_IBSIM[SMIR_IBSIM.index("SMInfoRecord dump:", 10) :].replace(
        "SMState...............2", "SMState...............3"
    )
    a.beat()
    [fabric] = api.get("/api/v1/fabrics").json()["fabrics"]
    assert fabric["identity"] == MASTER  # lowest GUID seen together, kept through the failover
    assert fabric["master"]["guid"] == STANDBY
    assert [(c["from"], c["to"]) for c in fabric["master_changes"]] == [(MASTER, STANDBY)]
    codes = {p["code"] for p in fabric["problems"]}
    assert codes == {"recent_failover", "no_standby"}
    assert MasterChange.objects.count() == 1


def test_two_independent_fabrics_under_one_name_are_told_apart(cluster, api):
    a = cluster("gpu-a")
    b = cluster("gpu-b", Tools(other_fabric(SMINFO_IBSIM), other_fabric(SMIR_IBSIM)))
    a.beat(), b.beat()
    data = api.get("/api/v1/fabrics").json()
    assert sorted(f["identity"] for f in data["fabrics"]) == [MASTER, "0x0000000000200001"]
    assert any(w["kind"] == "name_covers_fabrics" and w["name"] == "ib-a" for w in data["warnings"])
    catalog.apply_text(
        "models:\n  - name: two\n    source: x\n    profiles:\n      - name: p\n"
        "        nodes_per_replica: 2\n        fabric: ib-a\n        memory_gb: 1\n"
    )
    result = placement.dry_run("two")
    assert result.decision is None, "a replica must never span two physical fabrics"
    assert "ib-a@0x0000000000100001 has 1 node that fit, needs 2" in result.explanation.render()


def test_a_pulled_cable_takes_the_node_off_the_fabric_within_one_heartbeat(cluster):
    a = cluster("gpu-a")
    a.beat()
    assert Node.objects.get(name="gpu-a").active_fabrics == ["ib-a"]
    a.pull("mlx5_0"), a.pull("mlx5_1")
    sent = a.beat(seconds=10)
    assert sent["fabrics_changed"] is True and sent["fabrics_active"] == []
    assert Node.objects.get(name="gpu-a").active_fabrics == []


def test_a_node_whose_adapters_for_one_name_sit_on_two_fabrics_is_refused(cluster):
    class Split(Tools):
        def __call__(self, argv: Sequence[str]) -> CommandResult:
            result = super().__call__(argv)
            if "mlx5_1" in argv:
                return CommandResult(0, other_fabric(result.stdout), "")
            return result

    a, b = cluster("gpu-a", Split()), cluster("gpu-b")
    a.beat(), b.beat()
    assert PhysicalFabric.objects.count() == 2
    catalog.apply_text(
        "models:\n  - name: two\n    source: x\n    profiles:\n      - name: p\n"
        "        nodes_per_replica: 2\n        fabric: ib-a\n        memory_gb: 1\n"
    )
    text = placement.dry_run("two").explanation.render()
    assert "gpu-a cannot be used across nodes: its adapters for ib-a sit on 2 fabrics" in text


@pytest.mark.django_db(transaction=True)
def test_ctl_fabrics_shows_managers_problems_and_changes(
    cluster, live_server, operator, monkeypatch, capsys
):
    from llmgw.cli import ctl

    tools = Tools()
    a = cluster("gpu-a", tools)
    a.beat()
    tools.sminfo = SMINFO_IBSIM.replace("lid 1 sm guid 0x100001", "lid 3 sm guid 0x100003")
    tools.smir = SMIR_IBSIM[SMIR_IBSIM.index("SMInfoRecord dump:", 10) :]
    a.beat()
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    assert ctl.main(["fabrics"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "FABRIC",
        "KIND",
        "NAMES",
        "MASTER",
        "STANDBYS",
        "UP/PORTS",
        "DOWN",
        "NODES",
        "PROBLEMS",
    ]
    assert out[1].split() == [
        MASTER,
        "infiniband",
        "ib-a",
        STANDBY,
        "-",
        "8/8",
        "0",
        "1",
        "no_standby,recent_failover",
    ]
    assert any(f"master {MASTER} -> {STANDBY}" in line for line in out)
