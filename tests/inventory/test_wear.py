"""Wear is a state, not an event: a card's last known wear stays on /metrics
while its node keeps reporting it, however long the fault lasts, and a card
that drops out of the reports is marked stale rather than silently gone.

The agent's real collectors read a fake NVML built from real nvidia-smi
captures. The past heartbeats go through the inventory service with their
own times (the path the agent API takes once it has checked a payload);
the last one goes through the agent API now."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from llmgw_agent.collectors.gpu import collect_gpus

from llmgw.inventory import heartbeats
from llmgw.inventory.gpus import WEAR
from llmgw.inventory.models import Node
from tests.inventory.test_gpus import A100_PENDING, H100, join_with_gpus
from tests.inventory.test_metrics import scrape
from tests.payloads import heartbeat


def wear_window() -> float:
    return 2 * settings.MEASUREMENT_MAX_AGE_S


def beat(name: str, roots: Any, clock: Any, xid_on: int | None = None, drop: int | None = None):
    """The agent's next heartbeat, ten seconds on: the minute's wear readings
    come with every sixth. `xid_on` has logged XID 63 (a row remap recorded);
    `drop` is a card whose wear the agent could no longer read."""
    clock.t += 10
    sample = collect_gpus(roots)
    for gpu in sample["gpus"]:
        if gpu["index"] == xid_on and "remapped_rows" in gpu:
            gpu["xids"] = {"63": 1}
        if gpu["index"] == drop:
            for key in WEAR:
                gpu.pop(key, None)
    return heartbeat(name, **sample)


def hold(
    name: str, roots: Any, clock: Any, since: datetime, until: datetime, **kw: Any
) -> list[datetime]:
    """Heartbeats every 10 s from `since` to `until`; returns when the
    minute's wear readings went out."""
    node, at, read = Node.objects.get(name=name), since, []
    while at < until:
        payload = beat(name, roots, clock, **kw)
        if any("pcie_replays" in g for g in payload["gpus"]):
            read.append(at)
        heartbeats.heartbeat(node, payload, at)
        at += timedelta(seconds=10)
    return read


def gpu_labels(m: dict, name: str, index: int) -> tuple:
    [key] = [k for k in m["llmgw_gpu_info"] if ("node", name) in k and ("gpu", str(index)) in k]
    labels = dict(key)
    return (("class", labels["class"]), ("gpu", str(index)), ("node", name))


def test_a_fault_held_past_the_staleness_window_stays_on_metrics(make_node, agent_client, api):
    agent, roots, clock = join_with_gpus(make_node, agent_client, "a100-1", A100_PENDING)
    first = collect_gpus(roots)["gpus"]
    [pending] = [g["index"] for g in first if (g.get("remapped_rows") or {}).get("pending")]
    now = timezone.now()
    # The same pending remap and XID, every 10 s for five minutes: far past
    # the window in which one missed reading is forgiven.
    hold("a100-1", roots, clock, now - timedelta(minutes=5), now, xid_on=pending)
    clock.t += 50  # the next heartbeat brings the minute's readings again
    with CaptureQueriesContext(connection) as queries:
        answer = agent.post("heartbeat", beat("a100-1", roots, clock, xid_on=pending))
    assert answer.status_code == 200, answer.content
    # Nothing changed, so still the one UPDATE of the hot path (after the
    # credential's SELECT: the test client comes in through DRF's view).
    _, update = queries.captured_queries
    assert "UPDATE" in update["sql"]

    m = scrape(api)
    card = gpu_labels(m, "a100-1", pending)
    assert m["llmgw_gpu_remapped_rows"][(*card, ("state", "pending"))] == 1
    xid = (*card[:2], ("kind", "hardware"), ("node", "a100-1"), ("xid", "63"))
    assert m["llmgw_gpu_xid_total"][xid] == 1
    assert m["llmgw_gpu_healthy"][card] == 0
    assert m["llmgw_gpu_wear_stale"][card] == 0
    assert 0 <= m["llmgw_gpu_wear_age_seconds"][card] < wear_window()


def test_a_card_dropped_from_the_wear_report_is_stale_not_gone(make_node, agent_client, api):
    agent, roots, clock = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    now = timezone.now()
    start, dropped_at = now - timedelta(minutes=5), now - timedelta(minutes=3)
    last_read = hold("dgx-1", roots, clock, start, dropped_at)[-1]
    # From here on the agent cannot read card 5's wear; the other seven
    # still report theirs.
    hold("dgx-1", roots, clock, dropped_at, now, drop=5)
    clock.t += 50
    assert agent.post("heartbeat", beat("dgx-1", roots, clock, drop=5)).status_code == 200

    before = timezone.now()
    m = scrape(api)
    after = timezone.now()
    gone, kept = gpu_labels(m, "dgx-1", 5), gpu_labels(m, "dgx-1", 0)
    assert m["llmgw_gpu_pcie_replay_total"][kept] == 67
    assert m["llmgw_gpu_wear_stale"][kept] == 0
    assert m["llmgw_gpu_wear_age_seconds"][kept] < wear_window()
    # Card 5's old readings are not passed off as current...
    assert gone not in m["llmgw_gpu_pcie_replay_total"]
    # ...and it is not silently gone either: it says how old its wear is.
    assert m["llmgw_gpu_wear_stale"][gone] == 1
    age = m["llmgw_gpu_wear_age_seconds"][gone]
    assert (before - last_read).total_seconds() - 1 <= age <= (after - last_read).total_seconds()
    assert age > wear_window()


def test_a_node_that_stops_reporting_wear_has_every_card_stale(make_node, agent_client, api):
    agent, roots, clock = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    now = timezone.now()
    hold("dgx-1", roots, clock, now - timedelta(minutes=5), now - timedelta(minutes=3))
    # Heartbeats go on, but none carries the minute's readings any more.
    for gpu in (payload := beat("dgx-1", roots, clock))["gpus"]:
        for key in WEAR:
            gpu.pop(key, None)
    assert agent.post("heartbeat", payload).status_code == 200
    m = scrape(api)
    cards = [gpu_labels(m, "dgx-1", i) for i in range(8)]
    assert all(m["llmgw_gpu_wear_stale"][c] == 1 for c in cards)
    assert all(m["llmgw_gpu_wear_age_seconds"][c] > 170 for c in cards)
    assert not any(("node", "dgx-1") in k for k in m.get("llmgw_gpu_pcie_replay_total", {}))
