"""A stored fleet for the what-if tests: nodes registered and heartbeating
as agents do, with rack and PDU labels, a catalog, replicas placed by the
reconciler."""

from __future__ import annotations

from typing import Any

from tests.payloads import heartbeat, registration

GiB = 2**30
CLASS = "H100-80GB"


def gpus(n: int, name: str) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "uuid": f"GPU-{name}-{i}",
            "name": "NVIDIA H100 80GB HBM3",
            "class": CLASS,
            "memory_total_bytes": 80 * GiB,
        }
        for i in range(n)
    ]


def add_node(
    make_node: Any,
    agent_client: Any,
    name: str,
    *,
    rack: str,
    pdu: str,
    gpu_count: int = 8,
    memory_gb: float = 512,
    cpus: int = 64,
) -> None:
    _, credential = make_node(name)
    system = {
        **registration(name)["system"],
        "memory_total_bytes": int(memory_gb * GiB),
        "cpus": cpus,
    }
    labels = {"llmgw.io/rack": rack, "llmgw.io/pdu": pdu, "llmgw.io/site": "s1"}
    extra = {"gpus": gpus(gpu_count, name)} if gpu_count else {}
    client = agent_client(credential)
    assert (
        client.post(
            "register", registration(name, system=system, labels=labels, **extra)
        ).status_code
        == 200
    )
    assert client.post("heartbeat", heartbeat(name)).status_code == 200


def catalog_text(models: list[tuple[str, int, int, float]]) -> str:
    """(name, always_running, GPUs per replica (0: CPU), memory GiB) each."""
    out = ["models:"]
    for name, always, gpu_count, memory in models:
        out += [
            f"  - name: {name}",
            f"    source: hf://x/{name}",
            f"    always_running: {always}",
            "    profiles:",
            "      - name: main",
            f"        memory_gb: {memory}",
            "        cpu_cores: 2",
        ]
        if gpu_count:
            out += [f"        gpu_class: {CLASS}", f"        gpus_per_shard: {gpu_count}"]
    return "\n".join(out) + "\n"
