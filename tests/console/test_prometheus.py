"""The node page's charts read a real Prometheus: Debian's prometheus
scrapes the control plane's /metrics targets with an API token, laid out
as deploy/prometheus/prometheus.yml lays them out, and the console's
PromQL proxy returns what it stored. The same Prometheus evaluates the
project's alert rules against what it scraped."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from llmgw_agent.collectors.gpu import collect_gpus

from tests.inventory.test_gpus import A100_PENDING, H100, join_with_gpus
from tests.inventory.test_wear import beat
from tests.payloads import heartbeat, registration
from tests.servers import free_port
from tests.threads import checked_out_elsewhere, left_after
from tests.tokens import make_token

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
PRODUCTION = ALERTS.parent / "prometheus.yml"

pytestmark = pytest.mark.django_db(transaction=True)


def scrape_config(target: str, token: Path, every: str = "1s") -> str:
    """deploy/prometheus/prometheus.yml pointed at `target`: the jobs, node
    shards and relabelling production uses, scraped `every` second."""
    config = yaml.safe_load(PRODUCTION.read_text())
    config["global"] = {"scrape_interval": every, "evaluation_interval": "1s"}
    config["rule_files"] = [str(ALERTS)]
    for job in config["scrape_configs"]:
        job["authorization"]["credentials_file"] = str(token)
        for group in job["static_configs"]:
            group["targets"] = [target]
    return yaml.safe_dump(config)


@pytest.fixture
def prometheus(live_server, operator, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is installed by make services"
    (tmp_path / "token").write_text(make_token(operator))
    target = live_server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(scrape_config(target, tmp_path / "token"))
    port = free_port()
    held = checked_out_elsewhere()
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
        # The live server's threads still answering its last scrapes give
        # their connections back as they finish: on a loaded machine a
        # scrape Prometheus gave up on ran on for seconds, and seven of them
        # were still running when the test ended.
        left_after(held, 30)


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
    # Asked again until the series is there: on a loaded machine a 1 s
    # scrape can time out just after the first, and the series is then
    # stale at the range's end with no earlier step to hold it.
    while True:
        answer = client.get(
            "/console/api/promql", {"query": 'llmgw_node_cpus{node="gpu-1"}', "seconds": 300}
        ).json()
        assert answer["configured"] is True and answer["status"] == "success"
        if answer["data"]["result"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    [series] = answer["data"]["result"]
    assert series["metric"]["node"] == "gpu-1" and float(series["values"][-1][1]) == 192


def scrape_errors(prometheus: str) -> dict[str, str]:
    """Each target's last scrape error, for a test's failure to say why."""
    try:
        answer = httpx.get(f"{prometheus}/api/v1/targets", timeout=5).json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"prometheus": repr(exc)}
    targets = answer.get("data", {}).get("activeTargets", [])
    return {t["labels"]["instance"]: t["lastError"] for t in targets if t.get("lastError")}


def firing(prometheus: str, alertname: str) -> dict[tuple[str, str], dict]:
    """The named alert's firing instances, by node and GPU."""
    answer = httpx.get(f"{prometheus}/api/v1/alerts", timeout=5).json()
    return {
        (a["labels"]["node"], a["labels"]["gpu"]): a
        for a in answer["data"]["alerts"]
        if a["labels"]["alertname"] == alertname and a["state"] == "firing"
    }


def missed_scrapes(prometheus: str, seconds: float, nodes: list[str]) -> list[str]:
    """The targets holding `nodes`' series a scrape of which failed in the
    last `seconds`. Only those: a failed scrape of another shard leaves
    these nodes' series alone, and on a loaded machine some scrape of the
    seventeen a second nearly always fails."""
    span = f"{int(seconds) + 2}s"
    pattern = "|".join(nodes)
    theirs = f'group by (instance) (last_over_time({{node=~"{pattern}"}}[{span}]))'
    query = f"(min_over_time(up[{span}]) == 0) and on (instance) {theirs}"
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}, timeout=5).json()
    return [r["metric"].get("instance", "") for r in answer["data"]["result"]]


def test_a_held_fault_keeps_its_alert_and_a_card_gone_quiet_raises_one(
    prometheus, make_node, agent_client, settings
):
    # Wear is stale after two readings' worth of silence: six seconds here,
    # so the fault below outlasts the window three times over. A window of
    # two seconds was shorter than a pause of this test's own beats on a
    # busy machine: card 1's wear went stale between two of them, and its
    # alert resolved and fired again (a new activeAt) with nothing wrong.
    settings.MEASUREMENT_MAX_AGE_S = 3
    window = 2 * settings.MEASUREMENT_MAX_AGE_S
    a100, a100_roots, a100_clock = join_with_gpus(make_node, agent_client, "a100-1", A100_PENDING)
    dgx, dgx_roots, dgx_clock = join_with_gpus(make_node, agent_client, "dgx-1", H100)
    [pending] = [
        str(g["index"])
        for g in collect_gpus(a100_roots)["gpus"]
        if (g.get("remapped_rows") or {}).get("pending")
    ]
    dropped: set[int] = set()
    # When each report was answered, by the wall clock the server judges
    # staleness by: a gap longer than the window means the card really was
    # silent that long, so a resolve then is correct.
    answered = [time.time()]

    def report() -> None:
        # A minute of agent time per beat: each one brings the minute's wear
        # readings, the same pending remap and XID every time.
        for agent, name, roots, clock, kw in (
            (a100, "a100-1", a100_roots, a100_clock, {"xid_on": int(pending)}),
            (dgx, "dgx-1", dgx_roots, dgx_clock, {"drop": min(dropped, default=None)}),
        ):
            clock.t += 50
            assert agent.post("heartbeat", beat(name, roots, clock, **kw)).status_code == 200
            answered.append(time.time())

    def undisturbed(start: int, began: float) -> bool:
        """No gap between reports outgrew the window since report `start`,
        and no scrape of their shards failed since `began`."""
        gaps = (b - a for a, b in zip(answered[start:], answered[start + 1 :], strict=False))
        missed = missed_scrapes(prometheus, time.time() - began, ["a100-1", "dgx-1"])
        return max(gaps) < window and not missed

    def report_until(found, seconds: float, what: str):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            report()
            if answer := found():
                return answer
            time.sleep(0.5)
        raise AssertionError(f"Prometheus never showed {what}")

    remap = ("a100-1", pending)
    for _ in range(3):
        start, began = len(answered) - 1, time.time()
        first = report_until(
            lambda: firing(prometheus, "GpuRowRemapPendingOrFailed").get(remap),
            60,
            "the pending row remap alert",
        )
        held_until = time.monotonic() + 3 * window
        while time.monotonic() < held_until:
            report()
            time.sleep(0.5)
        now = firing(prometheus, "GpuRowRemapPendingOrFailed").get(remap)
        if undisturbed(start, began):
            break
        # The machine stalled this test's reports past the window, or one of
        # Prometheus's scrapes (every second here) outlasted its second: a
        # series then goes stale and its alert resolves, as Prometheus means
        # it to. Hold again.
    else:
        raise AssertionError(
            "every hold of the fault had a stall or a missed scrape; last scrape errors: "
            f"{scrape_errors(prometheus)}"
        )
    # Firing since the first report: it never resolved and fired again.
    assert now is not None, "the alert resolved while the card still reported the fault"
    assert now["activeAt"] == first["activeAt"]
    assert not firing(prometheus, "GpuWearStale"), "every card is reporting its wear"

    dropped.add(5)  # the agent can no longer read card 5's wear
    report_until(
        lambda: firing(prometheus, "GpuWearStale").get(("dgx-1", "5")), 45, "card 5's stale wear"
    )
    assert set(firing(prometheus, "GpuWearStale")) == {("dgx-1", "5")}
    still = firing(prometheus, "GpuRowRemapPendingOrFailed")[remap]
    if undisturbed(start, began):
        assert still["activeAt"] == first["activeAt"]
