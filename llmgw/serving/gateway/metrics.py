"""The gateway's figures on /metrics, summed over every gateway process.

Read from what each process publishes (llmgw.serving.gateway.load), so any
web process answering the scrape reports the whole gateway. A model no
gateway process has reported on lately has no sample: unknown, not zero.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmgw.serving.gateway import load


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
            "first byte where an engine's queue is unknown, and requests refused in the last "
            "second for want of a ready replica",
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
