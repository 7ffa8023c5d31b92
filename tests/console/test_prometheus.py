"""The node page's charts read a real Prometheus: Debian's prometheus
scrapes the control plane's /metrics with an API token, and the console's
PromQL proxy returns what it stored."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import httpx
import pytest
from rest_framework.authtoken.models import Token

from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(live_server, operator, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is installed by make services"
    (tmp_path / "token").write_text(Token.objects.create(user=operator).key)
    target = live_server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: llmgw\n"
        f"    authorization: {{type: Bearer, credentials_file: {tmp_path / 'token'}}}\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_the_promql_proxy_returns_what_prometheus_scraped(
    prometheus, make_node, agent_client, client, operator, settings
):
    _, credential = make_node("gpu-1")
    agent_client(credential).post("register", registration("gpu-1"))
    agent_client(credential).post("heartbeat", heartbeat("gpu-1"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            up = httpx.get(
                f"{prometheus}/api/v1/query", params={"query": "llmgw_node_cpus"}, timeout=5
            ).json()
            if up["data"]["result"]:
                break
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    else:
        raise AssertionError("Prometheus never scraped llmgw_node_cpus from /metrics")
    settings.PROMETHEUS_URL = prometheus
    client.force_login(operator)
    answer = client.get(
        "/console/api/promql", {"query": 'llmgw_node_cpus{node="gpu-1"}', "seconds": 300}
    ).json()
    assert answer["configured"] is True and answer["status"] == "success"
    [series] = answer["data"]["result"]
    assert series["metric"]["node"] == "gpu-1" and float(series["values"][-1][1]) == 192
