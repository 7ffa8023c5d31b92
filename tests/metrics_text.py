"""Read a /metrics answer with prometheus-client's own parser, so a test
checks what Prometheus would see, by sample name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[str, dict[tuple, float]]:
    """name -> (sorted label pairs) -> value."""
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found
