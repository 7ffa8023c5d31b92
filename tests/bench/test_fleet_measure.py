"""bench/fleet.py's measuring functions on a tiny fleet (four simulated
nodes and two probes) against a live server: every figure comes back, so
`make bench-fleet` cannot rot unseen. Nothing here is timed against a
target; the benchmark does that."""

from __future__ import annotations

import math
import os
from pathlib import Path

import msgspec
import pytest
from django.contrib.auth.models import User

from bench import fleet_measure as measure
from llmgw.accounts import roles
from llmgw.catalog import services as catalog
from llmgw.inventory import heartbeats, services
from llmgw.inventory.models import Node
from llmgw.simulator.fleet import make_fleet
from tests.tokens import make_token

ROOT = Path(__file__).resolve().parents[2]
MODEL = "qwen2.5-7b-instruct"

pytestmark = pytest.mark.django_db(transaction=True)


def join(sim) -> str:
    credential = services.join(sim.name, services.add_node(sim.name, "test"))
    node = services.register(
        Node.objects.get(name=sim.name), msgspec.to_builtins(sim.registration(10)), "127.0.0.1"
    )
    heartbeats.heartbeat(node, msgspec.to_builtins(sim.heartbeat()))
    return credential


@pytest.fixture
def plane(live_server) -> measure.Plane:
    for sim in make_fleet(4, prefix="tiny"):
        join(sim)
    catalog.apply_text((ROOT / "deploy" / "server.example.yaml").read_text())
    user = User.objects.create_user("bench", password="a-long-bench-password")
    roles.grant(user, roles.ADMIN)
    return measure.Plane(
        [live_server.url], make_token(user), "bench", "a-long-bench-password", lambda: [os.getpid()]
    )


def test_every_figure_comes_back(plane):
    use = measure.footprint(plane, 0.2)
    assert use["rss_bytes"] > 0 and use["cores"] >= 0 and use["processes"] >= 1

    sims = make_fleet(2, prefix="probe")
    probes = measure.probes_for([(sim, join(sim)) for sim in sims], 10)
    beats = measure.heartbeats(plane, probes, seconds=1.0, concurrency=2)
    assert beats["failed"] == 0 and beats["rate"] > 0
    assert 0 < beats["p50_s"] <= beats["p99_s"]

    scraped = measure.scrape(plane, shards=3)
    assert scraped["targets"] == 4  # the fleet target, three shards
    # The shards and the fleet target hold what /metrics holds whole (each
    # with its own HELP and TYPE lines).
    assert scraped["bytes"] > 0.95 * scraped["whole_bytes"] > 0
    assert scraped["slowest_s"] > 0 and scraped["cpu_s"] >= 0

    assert measure.first_looks(plane, MODEL) > 0
    placed = measure.placements(plane, MODEL, count=2, concurrency=1)
    assert placed["placed"] + placed["refused"] == 2
    assert placed["placed"] == 0 or placed["p50_s"] > 0
    assert not math.isnan(placed["rate"])
    assert measure.explain(plane, MODEL, runs=1) > 0

    listed = measure.ctl_nodes(plane)
    assert listed["seconds"] > 0 and listed["lines"] >= 6  # six nodes and a heading
    assert measure.first_paint(plane, runs=1) > 0


def test_the_bench_scrapes_the_shards_production_lists():
    shards = measure.production_shards()
    targets = measure.scrape_targets(["http://web1:8000", "http://web2:8000"], shards)
    assert targets[:2] == ["http://web1:8000/metrics/fleet", "http://web2:8000/metrics/fleet"]
    assert targets[2:] == [
        f"http://web{1 + i % 2}:8000/metrics/nodes?shard={i}&of={shards}" for i in range(shards)
    ]


def test_a_cost_the_fleets_idle_rate_swallows_is_not_measured():
    """Unknown is never shown as zero: work that cost less than the fleet's
    own load varied by meanwhile has no cost to show."""
    before = measure.Reading(at=0.0, web=10.0, workers=1.0, database=5.0, redis=100.0)
    after = measure.Reading(at=10.0, web=12.0, workers=1.0, database=5.5, redis=100.0)
    idle = measure.Reading(at=1.0, web=0.1, workers=0.0, database=0.1, redis=0.0)
    cost = before.cost(after, 100, idle)
    assert cost["web"] == pytest.approx(10.0)  # (2 s - 1 s idle) / 100, in ms
    assert math.isnan(cost["database"])  # 0.5 s spent, 1 s idle: swallowed
    assert math.isnan(cost["workers"]) and math.isnan(cost["redis"])
    # Without an idle rate a part that spent nothing did cost nothing.
    assert before.cost(after, 100)["workers"] == 0.0
