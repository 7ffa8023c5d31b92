"""What the operator on call reads with `llmgw ctl`, against a live server:
a node's cards, ports, replicas, cordon and heartbeat age; each held
model's ready count against its held counts; explain's refusals grouped
by their reason code."""

from __future__ import annotations

import re

import pytest

from llmgw.catalog import services as catalog
from llmgw.serving.models import Replica
from tests.inventory.test_ctl import columns, run
from tests.payloads import heartbeat, registration
from tests.tokens import make_token

pytestmark = pytest.mark.django_db(transaction=True)

GiB = 2**30
CATALOG = """
models:
  - name: small-cpu
    source: hf://x/small
    profiles:
      - name: cpu
        memory_gb: 15
        cpu_cores: 4
  - name: one-h100
    source: hf://x/gpu
    profiles:
      - name: h100
        gpu_class: H100-80GB
        gpus_per_shard: 1
"""


@pytest.fixture
def ctl_env(live_server, operator, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))
    catalog.apply_text(CATALOG)


@pytest.fixture
def add_node(make_node, agent_client):
    def add(name: str, gpus: list[dict] | None = None, **beat) -> None:
        _, credential = make_node(name)
        extra = {"gpus": gpus} if gpus else {}
        assert (
            agent_client(credential).post("register", registration(name, **extra)).status_code < 300
        )
        assert agent_client(credential).post("heartbeat", heartbeat(name, **beat)).status_code < 300

    return add


def blocks(out: str) -> dict[str, str]:
    """The page's tables by their first header word."""
    return {b.split()[0]: b for b in out.split("\n\n") if b.strip()}


PORTS = [
    {
        "device": "mlx5_0",
        "port": 1,
        "link_layer": "InfiniBand",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400,
        "rate_text": "400 Gb/sec (4X NDR)",
        "fabric": "ib-a",
    },
    # A port that said neither its state nor its rate: unknown, not 0 Gb/s.
    {"device": "mlx5_1", "port": 1},
]


def test_ctl_node_shows_cards_ports_replicas_cordon_and_heartbeat_age(add_node, ctl_env, capsys):
    cards = [
        {"index": 0, "uuid": "GPU-0", "class": "H100-80GB", "memory_total_bytes": 80 * GiB},
        {"index": 1, "uuid": "GPU-1", "class": "H100-80GB"},  # memory not said
    ]
    add_node("gpu-1", cards, ports=PORTS)
    code, out, err = run(capsys, "place", "small-cpu")
    assert code == 0, err
    assert run(capsys, "cordon", "gpu-1", "--reason", "fan failure")[0] == 0

    code, out, err = run(capsys, "node", "gpu-1")
    assert code == 0, err
    tables = blocks(out)
    card = columns(tables["CARD"])
    assert list(card["0"].values()) == ["0", "H100-80GB", "80.0 GiB", "healthy"]
    assert list(card["1"].values()) == ["1", "H100-80GB", "-", "healthy"]
    ports = columns(tables["DEVICE"])
    assert list(ports["mlx5_0"].values()) == [
        "mlx5_0",
        "1",
        "ACTIVE (LinkUp)",
        "400 Gb/s",
        "ib-a",
    ]
    assert list(ports["mlx5_1"].values()) == ["mlx5_1", "1", "-", "-", "-"]
    replica = Replica.objects.get()
    row = columns(tables["REPLICA"])[f"#{replica.pk}"]
    assert {k: v for k, v in row.items() if k != "AGE"} == {
        "REPLICA": f"#{replica.pk}",
        "MODEL": "small-cpu",
        "PROFILE": "cpu",
        "GPUS": "-",
        "CORES": "4",
        "MEMORY": "15.0 GiB",
        "STATE": "pending",
    }
    assert re.fullmatch(r"\d+ s", row["AGE"]), row
    assert re.search(r"^cordoned by ops at \S+: fan failure$", out, re.M), out
    beat = re.search(r"last heartbeat (\d+) s ago \((\S+)\)$", out, re.M)
    assert beat and int(beat[1]) < 60, out


def test_ctl_node_says_unknown_for_what_nobody_reported(add_node, ctl_env, capsys):
    from llmgw.inventory import services

    services.add_node("silent", "test")  # added, never joined: no heartbeat, no cards
    code, out, err = run(capsys, "node", "silent")
    assert code == 0, err
    assert "last heartbeat: never" in out
    assert "cards: none reported" in out and "ports: none reported" in out
    assert "replicas: none" in out


def test_ctl_status_shows_each_held_models_ready_count_against_its_target(
    add_node, ctl_env, capsys
):
    add_node("cpu-1")
    add_node("cpu-2")
    for _ in range(2):
        assert run(capsys, "place", "small-cpu")[0] == 0
    assert run(capsys, "model", "scale", "small-cpu", "--under-load", "3")[0] == 0
    ready = Replica.objects.order_by("pk").first()
    Replica.objects.filter(pk=ready.pk).update(state="ready")

    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert "held      small-cpu  1/2 ready (always_running 2, under_load 3)\n" in out, out
    assert "held      one-h100" not in out


def test_ctl_explain_groups_the_refused_nodes_by_reason(add_node, ctl_env, capsys):
    for n in range(1, 6):
        add_node(f"cpu-{n}")
    add_node("cpu-6")
    assert run(capsys, "cordon", "cpu-6", "--reason", "disk")[0] == 0

    code, out, err = run(capsys, "explain", "one-h100")
    assert code == 0, err
    lines = out.splitlines()
    assert "profile h100 (priority 0): does not fit" in lines, out
    # One line a reason, its nodes counted, the first three named, then one
    # node's own words with the number that bit.
    at = lines.index(
        "  5 nodes: no GPU of the class (no_gpu_of_class): cpu-1, cpu-2, cpu-3 and 2 more"
    )
    assert re.fullmatch(r"    e\.g\. cpu-1 .*H100-80GB.*", lines[at + 1]), lines[at + 1]
    assert "  1 node: cordoned (cordoned): cpu-6" in lines, out
    assert not any(re.match(r"\s+cpu-[2-5]\b", line) for line in lines), out
    assert lines[-1] == "every node on a line of its own: llmgw ctl explain one-h100 --all"

    code, out, err = run(capsys, "explain", "one-h100", "--all")
    assert code == 0, err
    # --all: every node on a line of its own, as the server renders them.
    for n in range(1, 6):
        assert re.search(rf"^    cpu-{n} .*H100-80GB", out, re.M), out
    assert "and 2 more" not in out and "e.g." not in out
