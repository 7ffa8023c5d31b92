"""Every `make bench-*` in its short form (`--short`): a few seconds of
each, on the test database, so that a benchmark that can no longer
measure (every request an error, nothing answered) fails here rather than
in the next person's run. Nothing is timed against a target; each
benchmark exits non-zero when a run had errors or measured nothing
(bench/figures.py), and prints its figures, which are looked for here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.servers import CHROMIUM

ROOT = Path(__file__).resolve().parents[2]

# Per Makefile target: its script, what its output must show it measured,
# and whether it needs the test database (as DATABASE_URL, or for the
# console's cluster page CLUSTER_DATABASE_URL).
BENCHES = {
    "bench-heartbeat": (
        "heartbeat.py",
        r"heartbeats/s [1-9]\d* .*\(\d+ answered, 0 failed\)",
        "db",
    ),
    "bench-gateway": (
        "gateway.py",
        r"\nllmgw +[1-9]\d* [\s\S]*\nllmgw +[0-9.]*[1-9][0-9.]* +[0-9]+% ",
        "db",
    ),
    "bench-routing": (
        "routing.py",
        r"\nllmgw prefix +\d+ [\s\S]*\nllmgw load +\d+ [\s\S]*prefix-aware vs load-only: TTFT"
        r"[\s\S]*\n1 request .* 200: 1\nburst of 10 .* 200: 10\n",
        "db",
    ),
    "bench-placement": (
        "placement.py",
        r"decisions +\d+ \([1-9]\d* placed[\s\S]*committed placements/s +[1-9]",
        "db",
    ),
    "bench-whatif": ("whatif.py", r"whatif sweep: [1-9]\d* domains", None),
    "bench-fabric": ("fabric.py", r"real DGX H100 NDR .* 582 ", None),
    "bench-console": (
        "console.py",
        r"real \(\d+ adapters\) +\d[\s\S]*\nall nodes, page 1 [\s\S]*"
        r"\nnode page \(node-\d+\) +\d[\s\S]*\nfacility page +\d",
        "cluster",
    ),
    "bench-ctl": ("ctl.py", r"\nstatus +\d+\.\d+s", "db"),
    "bench-simulate": (
        "simulate.py",
        r"steady state \(every node Ready on its interval\): \d+ s",
        "db",
    ),
    "bench-fleet": (
        "fleet.py",
        r"NotReady marks while joining and measuring \(nodes\) +0 +\d+\n"
        r"[\s\S]*\nplacements committed \(API\) \(/s\) .* [0-9.]*[1-9][0-9.]*\n"
        r"[\s\S]*\nrestart of every process: NotReady marks \(nodes\) +0 +\d+\n"
        r"[\s\S]*\noutage of every process: all nodes heard \(s\) .* [0-9.]+\n"
        r"[\s\S]*\nrack failure: all placed again, ready \(s\) +<= \d+ s +[0-9.]+\n"
        r"[\s\S]*\nwhole run: NotReady marks, the rack's left out \(nodes\) +0 +\d+\n",
        None,
    ),
}
# Those that draw a page in Chromium, skipped where it is missing as the
# console's tests are (make services installs it).
BROWSER = {"bench-console", "bench-fleet"}
# bench-fleet's short form also restarts the control plane, takes it away
# for 10 s and fails a rack: about 3 minutes on an idle 2-core machine.
TIMEOUT_S = {"bench-fleet": 600}


def makefile_targets() -> dict[str, str]:
    """Each bench-* target of the Makefile and its recipe."""
    text = (ROOT / "Makefile").read_text()
    found = {}
    for match in re.finditer(r"^(bench-[\w-]+):[^\n]*\n((?:\t[^\n]*\n)*)", text, re.M):
        found[match.group(1)] = match.group(2)
    return found


def test_every_make_bench_target_has_its_short_form_here():
    targets = makefile_targets()
    assert set(targets) == set(BENCHES)
    for target, (script, _, _) in BENCHES.items():
        # The script the target runs, with the arguments it passes on.
        assert f"bench/{script} $(BENCH_ARGS)" in targets[target], target


def database_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.mark.slow
# On the test database: committed rows, which the benchmark's own
# processes read, and which the flush after the test removes.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("target", list(BENCHES))
def test_the_benchmark_measures(target):
    script, measured, database = BENCHES[target]
    if target in BROWSER and not os.path.exists(CHROMIUM):
        pytest.skip("Chromium is not installed (make services)")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    if database:
        name = "CLUSTER_DATABASE_URL" if database == "cluster" else "DATABASE_URL"
        env[name] = database_url()
    done = subprocess.run(
        [sys.executable, f"bench/{script}", "--short"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S.get(target, 300),
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "could not measure" not in out
    assert re.search(measured, done.stdout), done.stdout[-4000:]
