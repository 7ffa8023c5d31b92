"""Benchmark the fabric map: parse + analyse, against the real ibnetdiscover.

    python bench/fabric.py

Times (median of several runs) parse+analyse of the real 582-adapter DGX H100
NDR dump and of generated fat trees of 2,000 and 16,000 adapters, with the
cost per adapter, which stays flat if the work is linear. There is no Python
peer for this format, so the peer measured in the same run is the real
``ibnetdiscover`` producing a dump from ibsim for a generated 1,000-adapter
fat tree (ibsim holds at most 2,048 nodes and 256 switches); the ratio printed
is parse+analyse time / discovery time for that same dump.

``--short`` (the real dump and a small tree, once each, no peer) is for the
tests: it measures nothing worth quoting, only that every dump is still
parsed; either form exits non-zero when a dump yields no adapter.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.figures import report_unmeasured  # noqa: E402
from llmgw.fabrics.ibnetdiscover import parse  # noqa: E402
from llmgw.fabrics.topology import analyze  # noqa: E402
from llmgw.simulator.fat_tree import FatTree, numbered_hosts  # noqa: E402
from llmgw.simulator.ibnetdiscover_dump import dump  # noqa: E402
from llmgw.simulator.ibsim_net import net_file  # noqa: E402

REAL = ROOT / "tests" / "data" / "realdata" / "ibnetdiscover-nvidia-topograph.txt"


def bench_tree(nodes: int, rate: str = "4xNDR") -> FatTree:
    """``nodes`` x 8 rails on 40-port leaves, 32 nodes to a leaf group, 8 spines."""
    hosts = numbered_hosts([8] * nodes)
    return FatTree("bench", hosts, hosts_per_leaf=32, spines=8, rate=rate, switch_ports=40)


def fat_tree(nodes: int) -> str:
    """The tree's ibnetdiscover text."""
    return dump(bench_tree(nodes))


def median_time(fn: Callable[[], object], runs: int) -> float:
    return median_times(fn, runs)[0]


def median_times(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """Median wall time and median CPU time of this process (a shared box inflates wall)."""
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def peer(nodes: int, runs: int = 5) -> tuple[str, float] | None:
    """Median time of the real ibnetdiscover on an ibsim fat tree, and its output."""
    ibsim, ibsim_run = shutil.which("ibsim"), shutil.which("ibsim-run")
    if ibsim is None or ibsim_run is None or shutil.which("ibnetdiscover") is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        # at HDR: ibsim hangs on NDR
        (work / "net").write_text(net_file(bench_tree(nodes, rate="4xHDR")))
        sock = f"llmgw-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "IBSIM_SOCKNAME": sock}
        log = open(work / "ibsim.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [ibsim, "-s", "-n", str(work / "net")],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while b"Network simulator ready" not in (work / "ibsim.log").read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    print((work / "ibsim.log").read_text()[-2000:], file=sys.stderr)
                    return None
                time.sleep(0.05)
            time.sleep(1.5)
            tool_env = {**env, "SIM_HOST": "node00000 mlx5_0"}
            out = ""

            def discover() -> None:
                nonlocal out
                done = subprocess.run(
                    [ibsim_run, "ibnetdiscover"],
                    cwd=work,
                    env=tool_env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                )
                out = done.stdout

            t = median_time(discover, runs)
            return out, t
        finally:
            proc.terminate()  # by PID
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="one run each, no peer")
    short = parser.parse_args().short
    print("fabric map: parse + analyse (median of runs)")
    print(
        f"{'dump':<44} {'adapters':>8} {'lines':>8} {'wall ms':>9} {'cpu ms':>8} "
        f"{'cpu us/adapter':>14}"
    )
    cases = [
        ("real DGX H100 NDR (tests/data/realdata)", REAL.read_text(), 21),
        ("generated fat tree, 250 nodes x 8 rails", fat_tree(250), 9),
        ("generated fat tree, 2000 nodes x 8 rails", fat_tree(2000), 5),
    ]
    if short:
        cases = [(name, text, 1) for name, text, _ in cases[:2]]
    measured: dict[str, tuple[int, int]] = {}
    for name, text, runs in cases:
        adapters = analyze(parse(text))["summary"]["adapters"]
        measured[name] = (adapters, 0)
        if not adapters:
            continue
        t, c = median_times(lambda: analyze(parse(text)), runs)  # noqa: B023 (runs now)
        print(
            f"{name:<44} {adapters:>8} {len(text.splitlines()):>8} {t * 1e3:>9.1f} "
            f"{c * 1e3:>8.1f} {c / adapters * 1e6:>14.1f}"
        )
    print()
    if short:
        print("peer: skipped (--short)")
        return report_unmeasured(measured)
    got = peer(125)
    if got is None:
        print(
            "peer: none available (ibsim/ibnetdiscover not installed: "
            "apt-get install -y ibsim-utils infiniband-diags opensm)"
        )
        return report_unmeasured(measured)
    text, t_disc = got
    r = analyze(parse(text))
    t_ours = median_time(lambda: analyze(parse(text)), 9)
    n = r["summary"]["adapters"]
    print(
        f"peer: real ibnetdiscover on ibsim, 125 nodes x 8 rails = {n} adapters, "
        f"{r['summary']['switches']} switches"
    )
    print(f"  ibnetdiscover (discovery, median of 5): {t_disc * 1e3:8.1f} ms")
    print(f"  parse + analyse of its output (median of 9): {t_ours * 1e3:8.1f} ms")
    print(f"  ratio parse+analyse / discovery: {t_ours / t_disc:.3f}")
    measured["peer's dump"] = (n, 0)
    return report_unmeasured(measured)


if __name__ == "__main__":
    sys.exit(main())
