"""Benchmark `llmgw ctl` at 5,000 nodes: each command as an operator runs
it (the installed command, a process of its own) against the control
plane under uvicorn on PostgreSQL.

    make bench-ctl        (DATABASE_URL: a PostgreSQL database of its own)

The fleet is bench/big_fleet.py's: 5,000 nodes written straight into the
database. Each command runs RUNS times; the median is printed beside its
target, with two peers measured in the same run: the interpreter starting
and doing nothing (`python -c pass`, the floor of any Python command) and
the same HTTP requests made from this process (what the server takes).
Targets: `ctl nodes` under 2 s, `ctl status` and `ctl explain` under 1 s.
The machine may be shared: the figures are only as quiet as it is.

`--short` (50 nodes, one run of each) is for the tests: it measures nothing
worth quoting, only that every command still answers. A command that
fails, or prints nothing, ends either form with a non-zero status.
"""

from __future__ import annotations

import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import big_fleet  # noqa: E402

from bench.figures import report_unmeasured  # noqa: E402
from llmgw.cli.ctl_models import EXPLAIN_NODES  # noqa: E402
from tests.servers import start_uvicorn  # noqa: E402

NODES = 5000
RUNS = 5
# What the installed `llmgw` script runs, on this checkout's code.
LLMGW = [sys.executable, "-c", "import sys; from llmgw.cli import main; sys.exit(main())"]
NODE_FIELDS = (
    "name,state,cordoned,cpus,memory_total_bytes,disk_local,gpu_classes,labels,engines,warnings"
)


def commands(nodes: int) -> list[tuple[list[str], float, list[str]]]:
    """(command, target in s, the requests it makes: the peer)."""
    page = f"limit=1000&fields={NODE_FIELDS}"
    return [
        (["nodes"], 2.0, [f"/api/v1/nodes?offset={o}&{page}" for o in range(0, nodes, 1000)]),
        (["nodes", "--state", "NotReady"], 2.0, [f"/api/v1/nodes?state=NotReady&{page}"]),
        (["nodes", "--domain", "rack=r010"], 2.0, [f"/api/v1/nodes?domain=rack=r010&{page}"]),
        (["status"], 1.0, ["/api/v1/nodes/summary", "/api/v1/models"]),
        (
            ["explain", big_fleet.RECORDED],
            1.0,
            [f"/api/v1/models/{big_fleet.RECORDED}/explain?nodes={EXPLAIN_NODES}"],
        ),
        (
            ["explain", big_fleet.DRY],
            1.0,
            [f"/api/v1/models/{big_fleet.DRY}/explain?nodes={EXPLAIN_NODES}"],
        ),
    ]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall time, the command's own CPU time (user + system), lines printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=300)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu, done.stdout.count(b"\n")


def main() -> int:
    import httpx

    # --nodes N: a smoke run on a small fleet; --short: the tests' run.
    short = sys.argv[1:2] == ["--short"]
    nodes = 50 if short else int(sys.argv[2]) if sys.argv[1:2] == ["--nodes"] else NODES
    repeat = 1 if short else RUNS
    print(f"building {nodes} nodes in PostgreSQL ...", flush=True)
    token = big_fleet.build(nodes)
    floor = [timed([sys.executable, "-c", "pass"], dict(os.environ)) for _ in range(repeat)]
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line a request otherwise
    rows = []
    with start_uvicorn(env=dict(os.environ)) as server:
        env = {
            **os.environ,
            "LLMGW_URL": server.url,
            "LLMGW_TOKEN": token,
            "LLMGW_CONFIG": "/nonexistent",
        }
        client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Token {token}"}, timeout=300
        )
        for words, target, requests in commands(nodes):
            timed([*LLMGW, "ctl", *words], env)  # warm: the server's first answer imports
            runs = [timed([*LLMGW, "ctl", *words], env) for _ in range(repeat)]
            http = []
            for _ in range(repeat):
                start = time.perf_counter()
                for path in requests:
                    client.get(path).raise_for_status()
                http.append(time.perf_counter() - start)
            rows.append((" ".join(words), target, runs, statistics.median(http)))
    print(
        f"\n{'llmgw ctl':<36}{'median':>8}{'target':>8}{'':>6}{'server':>8}"
        f"{'ctl CPU':>9}{'lines':>7}"
    )
    for name, target, runs, http in rows:
        took = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        verdict = "ok" if took < target else "SLOW"
        print(
            f"{name:<36}{took:>7.2f}s{target:>7.1f}s{verdict:>6}{http:>7.2f}s"
            f"{cpu:>8.2f}s{runs[0][2]:>7}"
        )
    print(
        f"peer: python -c pass {statistics.median(f[0] for f in floor):.2f}s "
        f"({statistics.median(f[1] for f in floor):.2f}s CPU), the floor of any Python command"
    )
    print(
        f"{nodes} nodes; median of {repeat} runs each, after one warm-up; server: the same "
        "requests from this process; ctl CPU: the command's own user + system time; "
        f"explain {big_fleet.DRY} is a dry run (never placed)"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    # A command that printed nothing measured nothing (a failed one already stopped the run).
    return report_unmeasured({f"ctl {name}": (runs[0][2], 0) for name, _, runs, _ in rows})


if __name__ == "__main__":
    sys.exit(main())
