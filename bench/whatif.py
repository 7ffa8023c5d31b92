"""What-if benchmark: `python bench/whatif.py` (add --quick for a smoke run).

A fleet of 5,000 nodes of 8 GPUs in 100 racks of 50, each rack on two
PDUs of 25 (200 PDUs), built in memory; 40 held models of 1, 2, 4 and 8
GPUs per replica placed on it by the scheduler itself until about 60% of
the GPUs are taken. Then `whatif sweep`'s code path (placement.whatif.sweep,
what /api/v1/whatif/sweep runs once the fleet is loaded) fails every rack
and every PDU in turn and places each one's lost replicas again.

`--short` (100 nodes, 4 racks) is for the tests: it measures nothing
worth quoting, only that the sweep still runs; either form exits non-zero
when nothing was held or no domain was swept.

Target: the sweep of 300 domains within 5 s. Prints the time, the figure
beside the target, the decisions made, and how many domains would hurt.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figures import report_unmeasured  # noqa: E402
from llmgw.placement.scheduler import Inventory  # noqa: E402
from llmgw.placement.types import Decision, GpuView, NodeView, Profile  # noqa: E402
from llmgw.placement.whatif import Fleet, HeldReplica, sweep  # noqa: E402
from llmgw.units import GiB  # noqa: E402

TARGET_S = 5.0
ISLANDS = (frozenset(range(4)), frozenset(range(4, 8)))


def nodes(size: int, racks: int) -> list[NodeView]:
    per_rack = size // racks
    out = []
    for i in range(size):
        rack = i // per_rack
        pdu = 2 * rack + (i % per_rack) * 2 // per_rack
        gpus = tuple(GpuView(g, f"GPU-{i}-{g}", "H100", 80 * GiB) for g in range(8))
        out.append(
            NodeView(
                name=f"gpu-{i:05d}",
                labels={
                    "llmgw.io/site": "s1",
                    "llmgw.io/rack": f"r{rack:03d}",
                    "llmgw.io/pdu": f"p{pdu:03d}",
                },
                cpus=128,
                memory_total_bytes=1_000 * GiB,
                gpus=gpus,
                nvlink_islands=ISLANDS,
                engines=frozenset({"vllm@0.6.3"}),
                engines_probed=True,
            )
        )
    return out


def workload(models: int) -> dict[str, list[Profile]]:
    out = {}
    for m in range(models):
        gpus = (1, 2, 4, 8)[m % 4]
        out[f"model-{m:02d}"] = [
            Profile(
                "main",
                0,
                "H100",
                gpus,
                gpus,
                memory_gb=20 * gpus,
                cpu_cores=2 * gpus,
                engine="vllm",
            )
        ]
    return out


def held(views: list[NodeView], profiles: dict[str, list[Profile]], share: float) -> Fleet:
    """Place replicas round-robin over the models until `share` of the GPUs
    are taken, with the scheduler; the views then carry their claims."""
    inv = Inventory(views)
    total = sum(len(v.gpus) for v in views)
    taken = 0
    replicas: list[HeldReplica] = []
    names = list(profiles)
    full: set[str] = set()
    while taken < share * total and len(full) < len(names):
        for model in names:
            if model in full:
                continue
            [p] = profiles[model]
            decision = inv.decide(model, p)
            if decision is None:
                full.add(model)
                continue
            inv.apply(decision)
            replicas.append(HeldReplica(len(replicas) + 1, decision))
            taken += p.gpus_per_shard
    return Fleet(claimed(views, replicas), replicas, profiles, count(replicas))


def count(replicas: list[HeldReplica]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for r in replicas:
        out[r.model] += 1
    return dict(out)


def claimed(views: list[NodeView], replicas: list[HeldReplica]) -> list[NodeView]:
    """apply_to_views for every decision at once (one pass, not one per decision)."""
    per: dict[str, list[Decision]] = defaultdict(list)
    for r in replicas:
        for s in r.decision.shards:
            per[s.node].append(r.decision)
    out = []
    for v in views:
        mine = per.get(v.name, [])
        taken = {i for d in mine for s in d.shards if s.node == v.name for i in s.gpu_indices}
        models: dict[str, int] = defaultdict(int)
        for d in mine:
            models[d.model] += 1
        shards = [s for d in mine for s in d.shards if s.node == v.name]
        out.append(
            replace(
                v,
                gpus=tuple(replace(g, allocated=g.index in taken) for g in v.gpus),
                claimed_memory_bytes=sum(s.memory_bytes for s in shards),
                claimed_cores=sum(s.cpu_cores for s in shards),
                models=dict(models),
            )
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes, 10 racks: a smoke run")
    parser.add_argument("--short", action="store_true", help="100 nodes: does it measure?")
    args = parser.parse_args()
    size, racks = (100, 4) if args.short else (500, 10) if args.quick else (5_000, 100)
    t0 = time.perf_counter()
    fleet = held(nodes(size, racks), workload(40), 0.6)
    built = time.perf_counter() - t0
    print(
        f"fleet: {size} nodes, {racks} racks, {2 * racks} PDUs, {len(fleet.replicas)} held replicas "
        f"of {len(fleet.profiles)} models (built in {built:.1f} s)"
    )
    t0, c0 = time.perf_counter(), time.process_time()
    tried, hurt = sweep(fleet)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    lost = sum(len(o.lost) for o in hurt)
    # On a shared machine the wall time includes waiting for a core; the
    # process's CPU time is what the sweep itself cost.
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"whatif sweep: {tried} domains in {took:.2f} s wall, {cpu:.2f} s CPU "
        f"({1000 * cpu / tried:.1f} ms of CPU a domain; load average {load})"
    )
    print(
        f"  target: {TARGET_S:.0f} s for 100 racks and 200 PDUs of 5,000 nodes -> by CPU "
        f"{cpu / TARGET_S:.2f} of the target ({'met' if cpu <= TARGET_S else 'MISSED'}), "
        f"by wall {took / TARGET_S:.2f}"
    )
    print(
        f"  {len(hurt)} domains would leave a held model below always_running ({lost} replicas lost in them)"
    )
    return report_unmeasured({"held replicas": (len(fleet.replicas), 0), "sweep": (tried, 0)})


if __name__ == "__main__":
    raise SystemExit(main())
