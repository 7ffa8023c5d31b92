# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""The gateway's latency histograms: requests through the gateway under
uvicorn, then /metrics scraped as Prometheus does, with a bearer token."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from django.core.cache import cache

from llmgw.catalog.models import Model
from llmgw.serving.gateway import load, metrics
from tests.metrics_text import samples
from tests.serving.gateway_peers import engines, gateway_server  # noqa: F401
from tests.serving.test_gateway import MESSAGES, client, key, replica
from tests.tokens import make_token

pytestmark = pytest.mark.django_db(transaction=True)
DURATION = "llmgw_gateway_request_duration_seconds"
TTFB = "llmgw_gateway_time_to_first_byte_seconds"


def scrape(http: Any, token: str) -> dict[str, dict[tuple, float]]:
    response = http.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    return samples(response.content.decode())


def buckets(found: dict[str, dict[tuple, float]], name: str, **labels: str) -> list[float]:
    rows = found[name + "_bucket"]
    want = sorted(labels.items())
    by_le = {dict(k)["le"]: v for k, v in rows.items() if [i for i in k if i[0] != "le"] == want}
    return [by_le[le] for le in [*map(str, metrics.BOUNDS), "+Inf"]]


def test_latency_histograms_per_model_and_code_summed_over_processes(
    gateway_server, engines, operator
):
    cache.clear()
    replica("tiny", engines("a").url)
    Model.objects.create(name="cold", source="hf://x/cold")
    oa = client(gateway_server, key("tiny", "cold"))
    gateway_server.refresh()
    for _ in range(3):
        oa.chat.completions.create(model="tiny", messages=MESSAGES)
    for _ in range(2):
        assert len(list(oa.chat.completions.create(model="tiny", messages=MESSAGES, stream=True)))
    with pytest.raises(openai.InternalServerError):
        oa.chat.completions.create(model="cold", messages=MESSAGES)
    gateway_server.publish()

    from django.test import Client

    token = make_token(operator)
    found = scrape(Client(), token)
    ok = buckets(found, DURATION, code="200", model="tiny")
    assert ok == sorted(ok), "buckets are cumulative"
    assert ok[-1] == 5 and ok[metrics.BOUNDS.index(120.0)] == 5
    labels = (("code", "200"), ("model", "tiny"))
    assert found[DURATION + "_count"][labels] == 5
    # A local fake engine: well under the client's 20 s timeout, and not nothing.
    assert 0 < found[DURATION + "_sum"][labels] < 5 * 20
    assert buckets(found, DURATION, code="503", model="cold")[-1] == 1
    first = buckets(found, TTFB, model="tiny")
    assert first[-1] == 5 and found[TTFB + "_count"][(("model", "tiny"),)] == 5
    assert 0 < found[TTFB + "_sum"][(("model", "tiny"),)] <= found[DURATION + "_sum"][labels]
    assert (("model", "cold"),) not in found[TTFB + "_count"]  # no replica ever answered

    # A second gateway process's report adds to the first's, bucket by bucket.
    gw = gateway_server.gateway
    report = metrics.latency_report(gw.durations, gw.first_bytes)
    load.publish({}, {}, {}, process="other:1", latency=report)
    twice = scrape(Client(), token)
    assert buckets(twice, DURATION, code="200", model="tiny") == [2 * n for n in ok]
    assert twice[DURATION + "_sum"][labels] == pytest.approx(2 * found[DURATION + "_sum"][labels])
    assert twice[TTFB + "_count"][(("model", "tiny"),)] == 10
