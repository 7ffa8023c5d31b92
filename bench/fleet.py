"""make bench-fleet: the whole control plane at fleet scale.

    make bench-fleet                         (1,000 then 5,000 nodes)
    make bench-fleet BENCH_ARGS="--nodes 200"   (a quick look)
    python bench/fleet.py --short            (the tests' run: does it measure?)

Starts the control plane as production runs it (bench/fleet_plane.py: two
uvicorn web processes, two Celery workers, a private PostgreSQL and Redis)
and grows a simulated fleet (`llmgw simulate`) to each size in turn. At
each size, once every node is Ready, it measures through the paths users
take (bench/fleet_measure.py): the control plane's CPU and memory with the
fleet beating; heartbeats answered per second and their p99 from 64 more
agents posting back to back on top of the fleet; one scrape of every
/metrics target of deploy/prometheus/prometheus.yml (and of /metrics
whole, for comparison); placements through the API and their p50; explain;
`llmgw ctl nodes`; the cluster page's first paint in Chromium.

At the largest size it then puts the fleet through what its operator lives
through (bench/fleet_events.py): every control-plane process restarted, at
once and one at a time with a migration; every process gone for five
minutes (--outage); and a rack of 40 nodes holding 100 replicas of a held
model dying at once while a client sends through the gateway. The rack is
its own `llmgw simulate` process, started first so the held model is placed
on it alone; --no-events leaves all three out.

The hall every simulated node is in keeps a power cap sized for the
fleet, so every placement pays the database's power check; --uncapped
takes the cap out, to see what that check costs.

`--short` (20 nodes, a few seconds of each load) measures nothing worth
quoting. Either form exits non-zero when a figure could not be measured,
a heartbeat or a placement failed, or no placement was committed.

Each figure is printed beside its target, and the last column is how it
grew from the first size to the last (last / first). Targets from the
issue; those marked "at 5,000" hold at 5,000 nodes.
"""

from __future__ import annotations

import argparse
import copy
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import fleet_events as events  # noqa: E402
from bench import fleet_measure as measure  # noqa: E402
from bench.fleet_measure import Reading  # noqa: E402
from bench.fleet_plane import Layout  # noqa: E402
from llmgw.simulator.swarm import LAG_S  # noqa: E402

MODEL = "qwen2.5-7b-instruct"  # one H100 a replica, in deploy/server.example.yaml
# The figures of the restart, the outage and the rack failure (left out of
# the table when they did not run).
EVENTS = ("restart_", "outage_", "rack_", "run_")
# Held on the rack that fails (nodes named RACK-*): started before the rest
# of the fleet, so its replicas are placed on the rack's nodes alone.
RACK, RACK_MODEL = "rack", "bench-rack"
HALL_W = 50_000_000  # watts: 5,000 nodes of eight 700 W cards, and more
MB = 1e6
WIDTH = 56  # the figures' names
# (key, what, target, unit scale, unit)
FIGURES = [
    ("ready_s", "fleet Ready after start", "-", 1, "s"),
    ("steady_not_ready", "NotReady marks while joining and measuring", "0", 1, "nodes"),
    # The simulator's own stalls (llmgw.simulator.swarm's watch): a node's
    # heartbeat late by half an interval still lands well within its grace.
    ("fleet_late", "simulated fleet's loop > 1 s late (10 s windows)", "-", 1, "windows"),
    ("fleet_late_s", "simulated fleet's loop late, the most", "HALF_INTERVAL", 1, "s"),
    ("heartbeat_rate", "heartbeats answered", ">= 1,000/s", 1, "/s"),
    ("heartbeat_p99", "heartbeat p99", "< 250 ms", 1e3, "ms"),
    ("first_look_s", "first look of every web process after growing", "-", 1, "s"),
    ("placement_rate", "placements committed (API)", ">= 100/s", 1, "/s"),
    ("placement_p50", "placement p50 (API)", "<= 50 ms", 1e3, "ms"),
    ("placement_failed", "placements failed (5xx, errors)", "0", 1, "calls"),
    ("placement_refused", "placements refused (409, with reasons)", "-", 1, "calls"),
    ("explain_s", "explain (API, 50 nodes named)", "<= 150 ms at 5,000", 1e3, "ms"),
    ("scrape_bytes", "scrape size, all targets", "-", 1 / MB, "MB"),
    ("scrape_slowest", "slowest /metrics target", "< 2 s", 1, "s"),
    ("scrape_cpu", "control-plane CPU per scrape", "< 10 s", 1, "s"),
    ("scrape_database_cpu", "PostgreSQL CPU per scrape", "-", 1, "s"),
    ("whole_s", "/metrics whole, one answer", "(for comparison)", 1, "s"),
    ("ctl_nodes", "llmgw ctl nodes (median of 3)", "< 2 s", 1, "s"),
    ("first_paint", "cluster page first paint", "< 2 s", 1, "s"),
    ("cores", "control-plane CPU, all of it", "-", 1, "cores"),
    ("rss", "control-plane RSS, all of it", "-", 1 / MB, "MB"),
    ("web_rss", "RSS of one web process (mean)", "-", 1 / MB, "MB"),
    ("database_cores", "PostgreSQL CPU, all of it", "-", 1, "cores"),
    ("cores_per_1000", "control-plane CPU per 1,000 nodes", "-", 1, "cores"),
    ("rss_per_1000", "control-plane RSS per 1,000 nodes", "-", 1 / MB, "MB"),
    # What each unit of work costs each part (docs/capacity.md's model).
    *[
        (f"cost_{unit}_{part}", f"{what}: {name}", "-", 1, "ms" if part != "redis" else "commands")
        for unit, what in (
            ("beat", "a heartbeat"),
            ("place", "a placement (API)"),
            ("join", "a joining node"),
        )
        for part, name in (
            ("web", "web CPU"),
            ("workers", "worker CPU"),
            ("database", "PostgreSQL CPU"),
            ("redis", "Redis"),
        )
    ],  # fmt: skip
    # What the operator lives through, at the largest size (fleet_events).
    ("restart_not_ready", "restart of every process: NotReady marks", "0", 1, "nodes"),
    ("restart_moved", "restart of every process: replicas moved", "0", 1, "replicas"),
    ("restart_heard_s", "restart of every process: all nodes heard", "<= 15 s", 1, "s"),
    ("restart_killed", "restart: stops past their grace, SIGKILLed", "-", 1, "processes"),
    ("outage_heard_s", "outage of every process: all nodes heard", "<= 30 s", 1, "s"),
    ("outage_peak_rate", "outage: peak nodes heard after return", "-", 1, "/s"),
    ("outage_not_ready", "outage: NotReady marks", "0", 1, "nodes"),
    ("outage_moved", "outage: replicas moved", "0", 1, "replicas"),
    ("rack_replicas", "rack failure: replicas on the rack", "-", 1, "replicas"),
    ("rack_recovery_s", "rack failure: all placed again, ready", "RACK_TARGET", 1, "s"),
    ("rack_claimed_twice", "rack failure: GPUs claimed twice", "0", 1, "GPUs"),
    ("rack_gateway_failed", "rack failure: gateway requests failed", "-", 1, "requests"),
    ("rack_gateway_failed_after", "rack failure: failed once all ready", "0", 1, "requests"),
    # Every mark of the run, between the events too: the rack's own left out.
    ("run_not_ready", "whole run: NotReady marks, the rack's left out", "0", 1, "nodes"),
]


def catalog(rack_replicas: int, capped: bool = True) -> str:
    """deploy/server.example.yaml, and the rack's held model: one H100 a
    replica, as MODEL's GPU profile. `capped`: the hall keeps a power cap
    (sized for the fleet), so every placement pays the database's power
    check; without, the hall has none."""
    data = yaml.safe_load((ROOT / "deploy" / "server.example.yaml").read_text())
    [gpu] = [
        p for m in data["models"] if m["name"] == MODEL for p in m["profiles"] if p["name"] == "gpu"
    ]
    held = {"name": RACK_MODEL, "source": "hf://Qwen/Qwen2.5-7B-Instruct-GGUF",
            "weights": "qwen2.5-7b-instruct-q4_k_m.gguf", "always_running": rack_replicas,
            "profiles": [copy.deepcopy(gpu)]}  # fmt: skip
    data["models"].append(held)
    # The example's hall holds the demo's dozen nodes: 200 kW. Every
    # simulated node is in it, and 5,000 of them draw megawatts: at that
    # cap the benchmark's placements were refused for power after the
    # first few hundred, and it measured refusals (each judging every node)
    # instead of placements. A hall of this size is budgeted so.
    budgets = data["facility"]["budgets"]
    if capped:
        budgets["room=hall1"] = HALL_W
    else:
        del budgets["room=hall1"]
    return yaml.safe_dump(data, sort_keys=False)


def costs(unit: str, cost: dict[str, float]) -> dict[str, float]:
    return {f"cost_{unit}_{part}": value for part, value in cost.items()}


def measure_size(
    layout: Layout, nodes: int, args: argparse.Namespace, faults: list[str], idle: list[Reading]
) -> dict[str, float]:
    """Every figure at this size. A figure whose path fails is left out
    (shown "-") and the failure added to `faults`: the others are still
    worth having, and the benchmark measures whatever the product does.
    `idle` gets the fleet's steady rates (what each part spends a second)."""
    plane = layout.plane()
    out: dict[str, float] = {}

    def attempt(what: str, step: Callable[[], dict[str, float]]) -> None:
        print(f"  {what} ...", flush=True)
        try:
            out.update(step())
        except Exception as exc:
            faults.append(f"{nodes:,} nodes, {what}: {exc}")

    def footprint() -> dict[str, float]:
        before = measure.read(plane)
        use = measure.footprint(plane, args.steady)
        after = measure.read(plane)
        idle[:] = [before.rate(after)]
        # Every node beats once an interval: the steady fleet's cost, streams
        # and periodic passes with it, is its heartbeats'.
        beats = nodes * (after.at - before.at) / args.interval
        return {
            "cores": use["cores"], "rss": use["rss_bytes"], "database_cores": use["database_cores"],
            "web_rss": use["web_rss_bytes"] / args.webs,
            "cores_per_1000": use["cores"] / nodes * 1000,
            "rss_per_1000": use["rss_bytes"] / nodes * 1000,
            **costs("beat", before.cost(after, beats)),
        }  # fmt: skip

    def heartbeats() -> dict[str, float]:
        beats = measure.heartbeats(plane, layout.probes(args.interval), seconds=args.beats_s)
        if beats["failed"]:
            faults.append(f"{nodes:,} nodes, heartbeats: {beats['failed']} failed")
        # The fleet's own, stored over the same seconds: each node beats at
        # most once in a window no longer than its interval.
        window = min(10.0, args.interval)
        rate = beats["rate"] + layout.beating(window) / window
        return {"heartbeat_rate": rate, "heartbeat_p99": beats["p99_s"]}

    def scrape() -> dict[str, float]:
        s = measure.scrape(plane, args.shards)
        return {
            "scrape_bytes": s["bytes"], "scrape_slowest": s["slowest_s"], "scrape_cpu": s["cpu_s"],
            "whole_s": s["whole_s"], "scrape_database_cpu": s["database_cpu_s"],
        }  # fmt: skip

    def placements() -> dict[str, float]:
        first = measure.first_looks(plane, MODEL)
        before = measure.read(plane)
        p = measure.placements(plane, MODEL, args.placements)
        cost = before.cost(measure.read(plane), max(p["placed"], 1.0), idle[0] if idle else None)
        if p["failed"] or not p["rate"]:
            faults.append(f"{nodes:,} nodes, placements: {p['failed']} failed, rate {p['rate']}")
        return {
            "first_look_s": first, "placement_rate": p["rate"], "placement_p50": p["p50_s"],
            "placement_failed": p["failed"], "placement_refused": p["refused"],
            **costs("place", cost),
        }  # fmt: skip

    attempt(f"steady state: CPU and memory over {args.steady:.0f} s", footprint)
    attempt("heartbeats", heartbeats)
    attempt(f"scrape of {args.shards} node shards and the fleet target", scrape)
    attempt(f"{args.placements} placements", placements)
    attempt("explain", lambda: {"explain_s": measure.explain(plane, MODEL)})
    attempt("llmgw ctl nodes", lambda: {"ctl_nodes": measure.ctl_nodes(plane)["seconds"]})
    attempt("the cluster page", lambda: {"first_paint": measure.first_paint(plane)})
    return out


def show(value: float | None, scale: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    value *= scale
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def report(
    sizes: list[int], results: dict[int, dict[str, float]], args: argparse.Namespace
) -> None:
    heads = [f"{n:,} nodes" for n in sizes]
    growth = len(sizes) > 1
    print(f"\n{'figure':<{WIDTH}}{'target':>20}" + "".join(f"{h:>14}" for h in heads)
          + (f"{'growth':>9}" if growth else ""))  # fmt: skip
    for key, what, target, scale, unit in FIGURES:
        values = [results[n].get(key) for n in sizes]
        if not any(v is not None for v in values) and key.startswith(EVENTS):
            continue  # not run (--no-events, or it stopped before)
        if target == "RACK_TARGET":
            target = f"<= {args.timing.rack_target_s:.0f} s" if args.timing else "-"
        if target == "HALF_INTERVAL":
            target = f"< {args.interval / 2:g} s"
        row = f"{what + ' (' + unit + ')':<{WIDTH}}{target:>20}"
        row += "".join(f"{show(v, scale):>14}" for v in values)
        if growth:
            first, last = values[0], values[-1]
            ratio = last / first if first and last is not None else float("nan")
            row += f"{'-' if math.isnan(ratio) else f'{ratio:.2f}x':>9}"
        print(row)
    print(
        f"\nheartbeats: the fleet's own (every {args.interval:g} s, counted as stored) plus 64 "
        f"agents posting back to back for {args.beats_s:g} s; p99 is theirs. placements: POST /api/v1/models/"
        f"{MODEL}/place, 8 at a time, {args.placements} each size; p50 of the committed. "
        f"scrape: /metrics/fleet on both web processes and {args.shards} node shards, one after "
        "another; CPU is the web processes' less their idle rate. CPU and RSS: web "
        "and worker processes with their children; PostgreSQL (the layout's own) apart; Redis "
        "not counted. The "
        "machine's other load is not controlled: compare sizes within one run."
    )
    if args.timing:
        t = args.timing
        print(
            f"\nat {sizes[-1]:,} nodes, with a {t.grace_s:g} s grace ({t.missed} missed heartbeats), "
            f"a staleness pass every {t.staleness_s:g} s and a reconciler tick every "
            f"{t.reconcile_s:g} s. restart: every web and worker process killed at once and "
            "started again, then each stopped (SIGTERM) and started in turn with the migrations "
            "run between; marks counted after a further grace. outage: every process killed for "
            f"{args.outage:g} s; peak: nodes first heard in any one second after the return. "
            f"rack failure: {args.rack_nodes} nodes holding {RACK_MODEL} ({args.rack_replicas} "
            "replicas) killed at once while a client sends chat completions through the gateway; "
            "recovery: until as many are ready elsewhere (target: grace + one pass + one tick + "
            "30 s)."
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1000,5000", help="fleet sizes, ascending: 1000,5000")
    parser.add_argument("--interval", type=float, default=10.0, help="simulated heartbeat interval")
    parser.add_argument("--placements", type=int, default=200)
    parser.add_argument(
        "--shards",
        type=int,
        default=measure.production_shards(),
        help="node shards scraped (of=N); deploy/prometheus/prometheus.yml's by default",
    )
    parser.add_argument("--steady", type=float, default=20.0, help="seconds of steady state")
    parser.add_argument("--logs", type=Path, help="keep every process's log in this folder")
    parser.add_argument(
        "--ready-timeout", type=float, help="seconds a size may take to be Ready (0.3 s a node)"
    )
    parser.add_argument("--webs", type=int, default=2, help="web processes (2 in production)")
    parser.add_argument(
        "--no-events", dest="events", action="store_false",
        help="leave out the restart, the outage and the rack failure",
    )  # fmt: skip
    parser.add_argument("--outage", type=float, default=300.0, help="seconds of the outage")
    parser.add_argument("--rack-nodes", type=int, default=40, help="nodes of the rack that fails")
    parser.add_argument("--rack-replicas", type=int, default=100, help="replicas held on it")
    parser.add_argument("--short", action="store_true", help="20 nodes, seconds of load")
    parser.add_argument(
        "--uncapped", action="store_true",
        help="no power cap on the hall (placements skip the power check)",
    )  # fmt: skip
    args = parser.parse_args()
    args.beats_s = 10.0
    if args.short:
        args.nodes, args.interval, args.placements, args.steady = "20", 2.0, 5, 2.0
        args.beats_s, args.outage, args.rack_nodes, args.rack_replicas = 2.0, 10.0, 8, 12
    args.timing = None
    try:
        sizes = [int(n.replace("_", "")) for n in args.nodes.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--nodes: whole numbers separated by commas, not {args.nodes!r}")
    if not sizes or sizes != sorted(set(sizes)) or sizes[0] < 1:
        parser.error(f"--nodes: ascending sizes of at least 1, not {args.nodes!r}")
    if args.events and sizes[0] <= args.rack_nodes:
        parser.error(f"--nodes: the fleet is larger than its rack of {args.rack_nodes}")
    if args.webs < 1:
        parser.error("--webs: at least 1")
    results: dict[int, dict[str, float]] = {}
    faults: list[str] = []
    failure = ""
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-fleet-") as tmp:
        layout = Layout(
            Path(tmp),
            catalog(args.rack_replicas if args.events else 0, not args.uncapped),
            args.webs,
        )
        try:
            print(
                f"starting PostgreSQL, Redis, {args.webs} web processes and 2 workers ...",
                flush=True,
            )
            layout.start()
            failure = grow_and_measure(layout, sizes, results, args, faults)
        finally:
            if args.logs:
                shutil.copytree(layout.logs, args.logs, dirs_exist_ok=True)
            layout.close()
    done = [n for n in sizes if n in results]
    if done:
        report(done, results, args)
    for fault in faults:
        print(f"not measured: {fault}", file=sys.stderr)
    if failure:
        print(f"\nnot measured: {failure}", file=sys.stderr)
    return 1 if failure or faults else 0


def fleet_marks(layout: Layout) -> int:
    """The fleet's nodes marked NotReady so far, the rack's (which the rack
    failure kills on purpose) left out. A node marked while the fleet
    joins or is measured was not heard in its grace: on this machine, a
    simulated fleet that could not send in time, or web processes that
    could not answer."""
    return events.marks(layout, leave_out=(f"{RACK}-",))


def fleet_late(layout: Layout) -> dict[str, float]:
    """The simulated fleet's own stalls so far: how many of its watch's
    windows its loop ran over LAG_S late in, and the most it ran late
    (left out when it never did: under LAG_S is all that is known)."""
    late = [s for s in layout.fleet_late() if s > LAG_S]
    return {"fleet_late": float(len(late)), **({"fleet_late_s": max(late)} if late else {})}


def grow_and_measure(
    layout: Layout,
    sizes: list[int],
    results: dict[int, dict[str, float]],
    args: argparse.Namespace,
    faults: list[str],
) -> str:
    """Each size in turn, into `results`; what stopped it, or "" when none did.
    With the events, the rack comes first and its held model is placed on
    it; the events run at the largest size, after its figures."""
    have = marked = 0
    idle: list[Reading] = []
    if args.events:
        print(f"the rack: {args.rack_nodes} nodes holding {args.rack_replicas} replicas ...")
        layout.simulate(RACK, args.rack_nodes, args.interval)
        try:
            layout.wait_ready(args.rack_nodes, timeout_s=300)
            events.wait_ready(layout, RACK_MODEL, args.rack_replicas, timeout_s=300)
        except Exception as exc:
            print(layout.log_tails(), file=sys.stderr)
            return f"the rack: {exc}"
        have = args.rack_nodes
    for size in sizes:
        print(f"{size:,} nodes: simulating {size - have:,} more ...", flush=True)
        started, before = time.monotonic(), measure.read(layout.plane())
        layout.simulate(f"f{size}", size - have, args.interval)
        try:
            layout.wait_ready(size, timeout_s=args.ready_timeout or max(300.0, size * 0.3))
            ready = time.monotonic() - started
            # What the nodes already there spent meanwhile is taken off.
            join = before.cost(measure.read(layout.plane()), size - have, idle[0] if idle else None)
            have = size
            results[size] = {
                "ready_s": ready, **costs("join", join),
                **measure_size(layout, size, args, faults, idle),
            }  # fmt: skip
            # Each reading reads every worker's whole log: once a size.
            marked, before_marks = fleet_marks(layout), marked
            results[size]["steady_not_ready"] = float(marked - before_marks)
            results[size].update(fleet_late(layout))
        except Exception as exc:  # the sizes measured so far are still worth printing
            print(layout.log_tails(), file=sys.stderr)
            return f"{size:,} nodes: {exc}"
    if args.events:
        live_through(layout, sizes[-1], results[sizes[-1]], args, faults)
        results[sizes[-1]]["run_not_ready"] = float(fleet_marks(layout))
        results[sizes[-1]].update(fleet_late(layout))
    return ""


def live_through(
    layout: Layout, nodes: int, out: dict[str, float], args: argparse.Namespace, faults: list[str]
) -> None:
    """The restart, the outage and the rack failure, in that order (the
    rack's nodes do not come back), into `out`."""
    args.timing = timing = events.timings(layout, args.interval)
    steps: list[tuple[str, Callable[[], dict[str, float]]]] = [
        ("restart of every process", lambda: events.restarts(layout, timing)),
        (f"outage of {args.outage:g} s", lambda: events.outage(layout, timing, args.outage)),
        (
            f"rack failure ({args.rack_nodes} nodes)",
            lambda: events.rack_failure(layout, timing, RACK_MODEL, RACK, args.rack_replicas),
        ),
    ]
    for what, step in steps:
        print(f"  {what} ...", flush=True)
        try:
            out.update(step())
        except Exception as exc:
            print(layout.log_tails(), file=sys.stderr)
            faults.append(f"{nodes:,} nodes, {what}: {exc}")
    if out.get("rack_claimed_twice"):  # never allowed, whatever the timings
        faults.append(f"{nodes:,} nodes: {out['rack_claimed_twice']:.0f} GPUs claimed twice")


if __name__ == "__main__":
    sys.exit(main())
