"""Every Grafana dashboard's queries, and the node page's charts, evaluated
by a real Prometheus that scraped a live /metrics fed by the demo-like
fleet's heartbeats: each must parse, and every metric it names must be one
llmgw exports with samples."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.catalog.models import Model
from llmgw.inventory.models import Node
from llmgw.serving import keys
from llmgw.serving.gateway import load, metrics
from llmgw.serving.models import HeldState, KeyUsage, Replica, Shard
from tests.console import fleet
from tests.console.test_prometheus import prometheus  # noqa: F401
from tests.inventory.test_gpus import A100_PENDING, join_with_gpus
from tests.inventory.test_wear import beat

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
NODE_PAGE = ROOT / "static" / "console" / "node.js"
# Grafana's own variables, as Grafana would expand them for a 6h range.
GRAFANA = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "6h"}
MODEL = "qwen2.5-7b-instruct"  # in deploy/server.example.yaml
METRIC = re.compile(r"\bllmgw_[a-z0-9_]+\b")

pytestmark = pytest.mark.django_db(transaction=True)


def queries(board: dict) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for each panel target and each templating query;
    label_values(expr, label) yields its expr."""

    def panels(items: list[dict]) -> Iterator[dict]:
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(board.get("panels", [])):
        for t in p.get("targets", []):
            yield f"{board['uid']}: {p['title']} {t['refId']}", t["expr"]
    for v in board.get("templating", {}).get("list", []):
        query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        found = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
        assert found, f"{board['uid']}: variable {v['name']} has a query we cannot check"
        yield f"{board['uid']}: variable {v['name']}", found.group(1)


def expand(expr: str, variables: list[str]) -> str:
    for name, value in GRAFANA.items():
        expr = expr.replace(name, value)
    for name in variables:
        expr = expr.replace(f"${name}", ".*")
    assert "$" not in expr, f"an unknown variable in {expr}"
    return expr


def boards() -> list[dict]:
    found = [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))]
    uids = {b["uid"] for b in found}
    assert {"llmgw-gpus", "llmgw-nodes", "llmgw-fabrics", "llmgw-gateway", "llmgw-held"} <= uids
    return found


def node_page_queries(node: str) -> list[tuple[str, str]]:
    """The PromQL the node page's charts send through the console's proxy,
    with its node (and GPU) selectors filled in as the page fills them."""
    script = NODE_PAGE.read_text()
    found = re.findall(r'title: "([^"]+)", query: `([^`]+)`', script)
    assert any(title == "Queue depth" for title, _ in found), "the node page charts queue depth"
    fill = {"${sel}": f'node="{node}"', "${gs}": f'node="{node}",gpu="0"'}
    out = []
    for title, query in found:
        for name, value in fill.items():
            query = query.replace(name, value)
        assert "${" not in query, f"node page {title}: {query} has a selector we cannot fill"
        out.append((f"node page: {title}", query))
    return out


def feed(url: str, data_dir: Path, make_node, agent_client) -> None:
    """Heartbeats from the simulated fleet and its ports; a model held at one
    replica, running one shard on an A100 node whose agent reports the
    shard's use, its sensors and a card's XID."""
    fleet.build(url, data_dir)
    model = Model.objects.get(name=MODEL)
    model.always_running = 1
    model.save(update_fields=["always_running"])
    HeldState.objects.create(model=model, target=1)
    # A key's usage as the gateway saves it: the tokens per key panel.
    key = keys.create_key("dashboards", None, [MODEL]).api_key
    KeyUsage.objects.create(
        api_key=key, model=MODEL, requests=3, prompt_tokens=30, completion_tokens=6
    )
    agent, roots, clock = join_with_gpus(make_node, agent_client, "a100-1", A100_PENDING)
    node = Node.objects.get(name="a100-1")
    replica = Replica.objects.create(model=model, profile=model.profiles.first(), state="ready")
    Shard.objects.create(replica=replica, node=node, rank=0, state="ready")
    payload = beat("a100-1", roots, clock, xid_on=0)
    payload["sensors"] = {
        "cpu_packages": [{"package": 0, "temperature_c": 61.0, "power_w": 180.0}],
        "inlet_temperature_c": 24.0,
    }
    payload["shards"] = [
        {
            "id": f"r{replica.pk}-0",
            "state": "ready",
            "replica": replica.pk,
            "cpu_cores": 2.5,
            "memory_bytes": 2**30,
        }
    ]
    assert agent.post("heartbeat", payload).status_code == 200


def gateway_report() -> None:
    durations: dict[str, metrics.Row] = {}
    first_bytes: dict[str, metrics.Row] = {}
    for seconds in (0.2, 1.5, 4.0, 9.0, 30.0):
        metrics.observe(durations, "200", seconds)
        metrics.observe(first_bytes, MODEL, seconds / 10)
    metrics.observe(durations, "503", 0.001)
    latency = metrics.latency_report({MODEL: durations}, first_bytes)
    load.publish(
        {MODEL: 2.0},
        {MODEL: 1},
        {MODEL: {"200": 5, "503": 1}},
        latency=latency,
        routing={MODEL: {"prefix": 4, "load": 2}},
    )


def scraped(server: str) -> set[str]:
    answer = httpx.get(f"{server}/api/v1/label/__name__/values", timeout=5).json()
    return set(answer["data"])


def test_every_dashboard_and_node_page_query_parses_and_reads_exported_metrics(
    prometheus,  # noqa: F811 (the fixture imported above)
    live_server,
    settings,
    tmp_path,
    make_node,
    agent_client,
):
    settings.DATA_DIR = tmp_path
    # The shard's use is exported while its heartbeat is younger than this;
    # on a loaded machine the wait below can outlast the default minute.
    settings.MEASUREMENT_MAX_AGE_S = 3600
    feed(live_server.url, tmp_path, make_node, agent_client)
    checks = [
        (where, expand(expr, [v["name"] for v in b["templating"]["list"]]))
        for b in boards()
        for where, expr in queries(b)
    ]
    checks += node_page_queries("a100-1")
    wanted = {name for _, expr in checks for name in METRIC.findall(expr)}
    deadline = time.monotonic() + 60
    while True:
        gateway_report()  # a gateway's figures are fresh for seconds only
        have = scraped(prometheus)
        if wanted <= have or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not wanted - have, f"no samples scraped for {sorted(wanted - have)}"
    results = {}
    for where, expr in checks:
        # Still reporting while the queries run: a report goes stale in
        # seconds, and the last queries come more than that after the first.
        gateway_report()
        answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
        body = answer.json()
        assert body["status"] == "success", f"{where}: {expr}: {body.get('error')}"
        results[where] = body["data"]["result"]
    # The node running the held model's shard charts that model's queue. A
    # scrape that came while the report was stale drops the series for that
    # instant, so ask again (reporting) until a scrape found it fresh.
    deadline = time.monotonic() + 30
    while not results["node page: Queue depth"] and time.monotonic() < deadline:
        gateway_report()
        time.sleep(1)
        expr = dict(checks)["node page: Queue depth"]
        answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
        results["node page: Queue depth"] = answer.json()["data"]["result"]
    [queue] = results["node page: Queue depth"]
    assert queue["metric"] == {"model": MODEL} and float(queue["value"][1]) == 2.0


def test_queries_name_the_metrics_they_read():
    # The scraped-names check above only means something if each query
    # names a metric: a typo in a function name would otherwise pass.
    for b in boards():
        for where, expr in queries(b):
            assert METRIC.search(expr), f"{where}: {expr} reads no llmgw metric"
