"""Placement benchmark: `python bench/placement.py` (add --quick for a smoke run).

Synthetic fleets of 500, 5,000 and 20,000 nodes of 8 GPUs, about half the
GPUs already allocated. Prints decisions per second, p50/p99 per decision,
the time to produce the full explanation of a refusal, peak memory, how
per-node cost grows between sizes, and a ratio against a peer measured in
the same run.

The peer: no other scheduler can be installed here, so it is a naive
implementation in this file, written the straightforward way - rebuild each
node's free state from the views and filter-then-sort every node on every
decision, with the same rules and the same preferences - and its decisions
are checked to be the same as llmgw's before its speed is compared.

Target at 5,000 nodes: 1,000 decisions/s, a full explanation within 100 ms.

`--short` (a few hundred nodes, a few dozen decisions) is for the tests:
it measures nothing worth quoting, only that decisions are still made.
Either form exits non-zero when no decision was made or the peer disagreed.

Then, beside it, the service path on PostgreSQL (bench/placement_service.py):
committed placements per second and per placement from the database to
committed claims at 5,000 nodes, and explain at 5,000 and 20,000 nodes.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figures import percentile, report_unmeasured  # noqa: E402
from llmgw.placement.claims import apply_to_views  # noqa: E402
from llmgw.placement.node_state import NodeState  # noqa: E402
from llmgw.placement.rules import pick_gpus  # noqa: E402
from llmgw.placement.scheduler import Inventory  # noqa: E402
from llmgw.placement.types import RACK, Decision, GpuView, NodeView, Profile, Shard  # noqa: E402
from llmgw.placement.verdicts import shard_refusal  # noqa: E402
from llmgw.units import GiB  # noqa: E402

SIZES = (500, 5_000, 20_000)
MODEL = "qwen2.5-72b"
ISLANDS = (frozenset(range(4)), frozenset(range(4, 8)))

WORKLOAD = [
    [Profile("tp1", 1, "H100", 1, 1, memory_gb=20, cpu_cores=4)],
    [Profile("tp2", 1, "H100", 2, 2, memory_gb=40, cpu_cores=8)],
    [
        Profile("tp8", 9, "H100", 8, 8, memory_gb=200, cpu_cores=16),
        Profile("tp4", 1, "H100", 4, 4, memory_gb=100, cpu_cores=8),
    ],
    [Profile("tp4-coding", 1, "H100", 4, 4, memory_gb=100, node_selector={"pool": "coding"})],
]
# Nothing has 1,500 GiB unclaimed: every node is checked in full, then refused.
REFUSED = [
    Profile("huge", 5, "H100", 8, 8, memory_gb=1_500),
    Profile("huge-cpu", 1, None, memory_gb=1_500, cpu_cores=64),
]


def fleet(size: int, seed: int = 7) -> list[NodeView]:
    rng = random.Random(seed)
    nodes = []
    for i in range(size):
        name = f"gpu-{i:05d}"
        used = rng.randint(0, 8)
        taken = set(rng.sample(range(8), used))
        gpus = tuple(
            GpuView(
                g,
                f"GPU-{i}-{g}",
                "H100",
                80 * GiB,
                healthy=rng.random() > 0.005,
                allocated=g in taken,
            )
            for g in range(8)
        )
        nodes.append(
            NodeView(
                name=name,
                state="Ready" if rng.random() > 0.01 else "NotReady",
                cordoned=rng.random() < 0.01,
                cordon_reason="RMA: GPU 3 fell off the bus",
                labels={"pool": "coding" if i % 10 == 0 else "general"},
                cpus=128,
                memory_total_bytes=1_000 * GiB,
                claimed_memory_bytes=used * 60 * GiB,
                claimed_cores=used * 8,
                gpus=gpus,
                fabrics={"ib-a" if i % 2 else "ib-b": ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")},
                nvlink_islands=ISLANDS,
                holds_weights=frozenset({MODEL}) if rng.random() < 0.02 else frozenset(),
                engines=frozenset({"llama.cpp@b11434", "vllm@0.6.3"}),
                engines_probed=True,
            )
        )
    return nodes


# -- the peer: filter-then-sort, no precomputation ---------------------------


def naive_place(model: str, profiles: Sequence[Profile], views: list[NodeView]) -> Decision | None:
    racks: dict[str, int] = {}
    for v in views:
        if RACK in v.labels:
            racks[v.labels[RACK]] = racks.get(v.labels[RACK], 0) + v.models.get(model, 0)

    def spread(v: NodeView) -> tuple[int, int]:
        mine = v.models.get(model, 0)
        return mine, racks[v.labels[RACK]] if RACK in v.labels else mine

    for p in sorted(profiles, key=lambda p: -p.priority):
        fits = []
        for ordinal, view in enumerate(views):
            n = NodeState(ordinal, view)
            if shard_refusal(n, p) is None:
                fits.append((n, pick_gpus(n, p)))
        if not fits:
            continue
        cls = p.gpu_class
        n, gpus = min(
            fits,
            key=lambda f: (
                *spread(f[0].view),
                model not in f[0].view.holds_weights,
                f[0].free_count(cls),
                f[0].ordinal,
            ),
        )
        assert gpus is not None
        shard = Shard(
            n.view.name,
            gpus,
            tuple(g.uuid for g in n.view.gpus if g.index in gpus),
            (),
            p.cpu_cores,
            p.memory_bytes,
            model in n.view.holds_weights,
        )
        return Decision(model, p.name, (shard,))
    return None


# -- measuring ---------------------------------------------------------------


def run_size(size: int, decisions: int, peer_decisions: int) -> dict[str, float]:
    views = fleet(size)
    t0 = time.perf_counter()
    inv = Inventory(views)
    build_s = time.perf_counter() - t0
    # A full collection now, not by chance inside the timed loop: one of a
    # fleet just built costs as much as hundreds of decisions, and whether it
    # lands in the loop moved the figures by a third between runs of one build.
    gc.collect()

    times: list[float] = []
    apply_times: list[float] = []
    made: list[Decision | None] = []
    cpu0 = time.process_time()
    for i in range(decisions):
        profiles = WORKLOAD[i % len(WORKLOAD)]
        t = time.perf_counter()
        result = inv.place(MODEL, profiles)
        times.append(time.perf_counter() - t)
        decision = result.decision
        made.append(decision)
        # Dropped unread, as a reconciler placing in a loop would: an
        # explanation still held when the copy changes is built first.
        del result
        if decision is not None:
            t = time.perf_counter()
            inv.apply(decision)
            apply_times.append(time.perf_counter() - t)

    # CPU time is what contention on a shared machine leaves alone.
    cpu_s = time.process_time() - cpu0

    # The full explanation of a refusal: decide, judge every node, group, render.
    gc.collect()
    explain: list[float] = []
    explain_cpu: list[float] = []
    lines = 0
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        refused = inv.place(MODEL, REFUSED)
        text = refused.explanation.render()
        explain.append(time.perf_counter() - t)
        explain_cpu.append(time.process_time() - c)
        assert refused.decision is None
        lines = len(refused.explanation.rejections)
    assert "needs 1.46 TiB" in text

    # The peer, on the same fleet and the same workload from the start.
    peer_views = list(views)
    peer_times: list[float] = []
    agree = True
    for i in range(min(peer_decisions, decisions)):
        profiles = WORKLOAD[i % len(WORKLOAD)]
        t = time.perf_counter()
        d = naive_place(MODEL, profiles, peer_views)
        peer_times.append(time.perf_counter() - t)
        mine = made[i]
        agree = agree and (d is None) == (mine is None) and (d is None or d.shards == mine.shards)  # type: ignore[union-attr]
        if d is not None:
            peer_views = apply_to_views(peer_views, d)

    tracemalloc.start()
    Inventory(views).place(MODEL, REFUSED).explanation.render()
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    mean = statistics.fmean(times)
    peer_mean = statistics.fmean(peer_times)
    placed = sum(d is not None for d in made)
    print(
        f"\n{size:,} nodes x 8 H100 ({sum(len(v.gpus) for v in views):,} GPUs, about half allocated)"
    )
    print(f"  index build           {build_s * 1e3:8.1f} ms")
    print(f"  decisions             {decisions:,} ({placed:,} placed, each applied to the copy)")
    print(
        f"  decisions/s           {1 / mean:10,.0f}   ({decisions / cpu_s:,.0f} by CPU time, apply included)"
    )
    print(
        f"  p50 / p99 per decision {percentile(times, 0.5) * 1e6:7.1f} us / {percentile(times, 0.99) * 1e6:.1f} us"
    )
    print(
        "  (the mean includes the first decision of each kind of profile,"
        " which indexes the fleet for that kind once)"
    )
    print(f"  apply p50             {percentile(apply_times, 0.5) * 1e6:8.1f} us")
    print(
        f"  full refusal explanation {min(explain) * 1e3:6.1f} ms best, "
        f"{statistics.median(explain) * 1e3:.1f} ms median, "
        f"{statistics.median(explain_cpu) * 1e3:.1f} ms CPU ({lines:,} rejections, 2 profiles)"
    )
    print(f"  peak memory           {traced_peak / 2**20:8.1f} MiB traced (index + explanation)")
    print(
        f"  peer (naive filter-then-sort, same rules, no index): {1 / peer_mean:,.1f} decisions/s"
    )
    print(
        f"  llmgw/naive speed     {peer_mean / mean:10,.1f}x   same decisions: {'yes' if agree else 'NO'}"
    )
    return {
        "decision": mean,
        "explain": statistics.median(explain),
        "build": build_s,
        "decision_cpu": cpu_s / decisions,
        "explain_cpu": statistics.median(explain_cpu),
        "placed": float(sum(d is not None for d in made)),
        "disagreed": float(not agree),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer decisions, smaller fleets")
    parser.add_argument("--short", action="store_true", help="seconds: does it measure?")
    parser.add_argument(
        "--no-service", action="store_true", help="the pure scheduler only, no database"
    )
    args = parser.parse_args()
    sizes = (100, 200) if args.short else (200, 1_000) if args.quick else SIZES
    decisions = 50 if args.short else 200 if args.quick else 2_000
    print("llmgw placement benchmark (peer: naive filter-then-sort in bench/placement.py)")
    # Wall-clock figures: on a shared machine they move with its load.
    load = os.getloadavg()[0]
    print(
        f"load average {load:.1f} on {os.cpu_count()} CPUs{' (busy: figures are noisy)' if load > (os.cpu_count() or 1) else ''}"
    )
    results = {}
    for size in sizes:
        results[size] = run_size(size, decisions, peer_decisions=max(5, 50_000 // size))
    print(
        "\nper-node cost by CPU time (build: wall), larger size against smaller"
        " (1.0 = linear growth, below = sublinear):"
    )
    for a, b in zip(sizes, sizes[1:], strict=False):
        for what in ("decision_cpu", "explain_cpu", "build"):
            ratio = (results[b][what] / b) / (results[a][what] / a)
            print(f"  {what.removesuffix('_cpu'):9s} {a:>6,} -> {b:>6,} nodes: {ratio:5.2f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\nprocess peak RSS {rss / 1024:.0f} MiB (getrusage)")
    at = 5_000 if 5_000 in results else sizes[-1]
    for clock, d, e in (
        ("wall clock", "decision", "explain"),
        ("CPU time", "decision_cpu", "explain_cpu"),
    ):
        ok = 1 / results[at][d] >= 1_000 and results[at][e] <= 0.1
        print(
            f"target at {at:,} nodes (1,000 decisions/s, explanation <= 100 ms) by {clock}: "
            f"{'met' if ok else 'MISSED'}"
        )
    runs = {
        f"pure scheduler at {size:,} nodes": (int(r["placed"]), int(r["disagreed"]))
        for size, r in results.items()
    }
    if not args.no_service and not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        print("\nservice path: skipped, it needs DATABASE_URL on PostgreSQL (make bench-placement)")
    elif not args.no_service:
        import placement_service

        if args.short:
            sizes, placements = (200,), 20
        else:
            sizes = (200, 1_000) if args.quick else (5_000, 20_000)
            placements = 40 if args.quick else 400
        runs.update(placement_service.main(sizes, placements))
    sys.exit(report_unmeasured(runs))


if __name__ == "__main__":
    main()
