"""The gateway's figures on /metrics, summed over every gateway process.

Read from what each process publishes (llmgw.serving.gateway.load), so any
web process answering the scrape reports the whole gateway. A model no
gateway process has reported on lately has no sample: unknown, not zero.

Latency is a histogram each process keeps in memory (`observe`, a bisect
and two additions per request) and publishes whole with its counters once
a second; the scrape adds the processes' buckets, so two web processes
never overwrite each other's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from llmgw.serving.gateway import load

# Seconds: an embedding answers in ten milliseconds, a long generation
# streams for minutes.
BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
_LE = [str(b) for b in BOUNDS] + ["+Inf"]

# A row: the count in each bucket (not cumulative; the last is +Inf), then the sum.
Row = list[float]


def observe(rows: dict[str, Row], key: str, seconds: float) -> None:
    row = rows.get(key)
    if row is None:
        row = rows[key] = [0.0] * (len(BOUNDS) + 2)
    row[bisect_left(BOUNDS, seconds)] += 1
    row[-1] += seconds


def latency_report(duration: dict[str, dict[str, Row]], ttfb: dict[str, Row]) -> dict[str, Any]:
    """What a process publishes: copies, as the request path keeps adding."""
    return {
        "bounds": list(BOUNDS),
        "duration": {
            m: {c: row.copy() for c, row in codes.items()} for m, codes in duration.items()
        },
        "ttfb": {m: row.copy() for m, row in ttfb.items()},
    }


def _add(total: dict[tuple[str, ...], Row], key: tuple[str, ...], row: Row) -> None:
    have = total.get(key)
    if have is None:
        total[key] = row.copy()
    else:
        for i, value in enumerate(row):
            have[i] += value


def _histograms(reports: list[dict[str, Any]]) -> Iterator[Metric]:
    durations: dict[tuple[str, ...], Row] = {}
    ttfbs: dict[tuple[str, ...], Row] = {}
    for report in reports:
        latency = report.get("latency")
        # A process on other bounds (mid-upgrade) cannot be added bucket by bucket.
        if not latency or latency.get("bounds") != list(BOUNDS):
            continue
        for model, codes in latency["duration"].items():
            for code, row in codes.items():
                _add(durations, (model, code), row)
        for model, row in latency["ttfb"].items():
            _add(ttfbs, (model,), row)
    duration = HistogramMetricFamily(
        "llmgw_gateway_request_duration_seconds",
        "From the gateway receiving a proxied request to its last byte sent, streams whole",
        labels=["model", "code"],
    )
    ttfb = HistogramMetricFamily(
        "llmgw_gateway_time_to_first_byte_seconds",
        "From the gateway receiving a proxied request to a replica's answer starting out",
        labels=["model"],
    )
    for family, rows in ((duration, durations), (ttfb, ttfbs)):
        for labels, row in sorted(rows.items()):
            buckets, seen = [], 0.0
            for le, count in zip(_LE, row[:-1], strict=True):
                seen += count
                buckets.append((le, seen))
            family.add_metric(list(labels), buckets, row[-1])
        yield family


def _routing(reports: list[dict[str, Any]]) -> Metric:
    counts: dict[tuple[str, str], int] = {}
    for report in reports:
        for model, policies in (report.get("routing") or {}).items():
            for policy, value in policies.items():
                counts[(model, policy)] = counts.get((model, policy), 0) + value
    family = CounterMetricFamily(
        "llmgw_gateway_routing_decisions",
        "Requests routed, by the policy that chose the replica: prefix (the longest prompt "
        "start a replica lately saw), load (no replica had seen any), balance (those that "
        "had were busier than the spread allows)",
        labels=["model", "policy"],
    )
    for (model, policy), value in sorted(counts.items()):
        family.add_metric([model, policy], value)
    return family


class GatewayCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        reports = load.reports()
        processes = GaugeMetricFamily(
            "llmgw_gateway_processes", "Gateway processes that reported in the last seconds"
        )
        processes.add_metric([], len(reports))
        yield processes
        if not reports:
            return
        depth = GaugeMetricFamily(
            "llmgw_gateway_queue_depth",
            "Requests waiting for the model: engine queues, the gateway's requests with no "
            "first byte where an engine's queue is unknown, those waiting in the gateway's "
            "queues for a free or a first replica, and those refused in the last few seconds",
            labels=["model"],
        )
        in_flight = GaugeMetricFamily(
            "llmgw_gateway_requests_in_flight",
            "Requests the gateway has sent to the model's replicas and not finished",
            labels=["model"],
        )
        requests = CounterMetricFamily(
            "llmgw_gateway_requests",
            "Gateway answers by model and status (499: the client hung up; stream_error: the "
            "replica failed after the first byte)",
            labels=["model", "code"],
        )
        depths: dict[str, float] = {}
        flights: dict[str, int] = {}
        counts: dict[tuple[str, str], int] = {}
        for report in reports:
            for model, value in report["depth"].items():
                depths[model] = depths.get(model, 0.0) + value
            for model, value in report["in_flight"].items():
                flights[model] = flights.get(model, 0) + value
            for model, codes in report["requests"].items():
                for code, value in codes.items():
                    counts[(model, code)] = counts.get((model, code), 0) + value
        for model, value in sorted(depths.items()):
            depth.add_metric([model], value)
        for model, value in sorted(flights.items()):
            in_flight.add_metric([model], value)
        for (model, code), value in sorted(counts.items()):
            requests.add_metric([model, code], value)
        yield depth
        yield in_flight
        yield requests
        yield _routing(reports)
        yield from _histograms(reports)
