"""docker-compose.yml is the production layout the README describes: two
web processes and two workers on PostgreSQL and Redis, one periodic
schedule (no beat of its own beside workers that hold the schedule's
lease), a database pool per process that fits PostgreSQL's connections,
and a Prometheus that can scrape what it is pointed at, with the alert
rules loaded. `docker compose config` checks the file too where the
compose plugin is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
PROMETHEUS = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
POSTGRES_MAX_CONNECTIONS = 100  # the postgres image's default


def llmgw_services() -> dict[str, dict]:
    return {
        name: s
        for name, s in COMPOSE["services"].items()
        if s.get("build") == "." and name != "migrate"
    }


def replicas(service: dict) -> int:
    return int((service.get("deploy") or {}).get("replicas", 1))


def test_two_web_processes_and_two_workers_with_one_schedule() -> None:
    services = llmgw_services()
    web = [n for n, s in services.items() if "command" not in s]  # the image's uvicorn
    workers = [
        n for n, s in services.items() if s.get("command", [None])[:2] == ["llmgw", "worker"]
    ]
    assert sum(replicas(services[n]) for n in web) >= 2, web
    assert sum(replicas(services[n]) for n in workers) >= 2, workers
    commands = [" ".join(s.get("command") or []) for s in COMPOSE["services"].values()]
    assert not any(re.search(r"\bbeat\b", c) for c in commands), commands


def test_every_process_pool_fits_postgres() -> None:
    services = llmgw_services()
    pool = sum(int(s["environment"]["LLMGW_DB_POOL_MAX"]) * replicas(s) for s in services.values())
    assert pool < POSTGRES_MAX_CONNECTIONS, pool


def test_prometheus_scrapes_hosts_django_accepts_and_loads_the_rules() -> None:
    default = re.search(r"ALLOWED_HOSTS:-([^}]*)}", (ROOT / "docker-compose.yml").read_text())
    allowed = set(default[1].split(","))
    targets = [
        t
        for job in PROMETHEUS["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    ]
    assert targets and {t.split(":")[0] for t in targets} <= allowed, (targets, allowed)
    web = {n for n, s in llmgw_services().items() if "command" not in s}
    assert {t.split(":")[0] for t in targets} == web
    assert PROMETHEUS["rule_files"] == ["alerts.yml"]


def test_prometheus_config_is_valid_with_its_token_file(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (make services installs it)")
    text = (ROOT / "deploy/prometheus/prometheus.yml").read_text()
    (tmp_path / "llmgw-token").write_text("a-token\n")
    text = text.replace("/etc/prometheus/llmgw-token", str(tmp_path / "llmgw-token"))
    (tmp_path / "prometheus.yml").write_text(text)
    shutil.copy(ROOT / "deploy/prometheus/alerts.yml", tmp_path / "alerts.yml")
    done = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 1 rule files found" in done.stdout + done.stderr


def test_docker_compose_reads_the_file() -> None:
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run([docker, "compose", "version"], capture_output=True).returncode
    ):
        pytest.skip("the docker compose plugin is not installed here")
    done = subprocess.run(
        [docker, "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env={"POSTGRES_PASSWORD": "x", "DJANGO_SECRET_KEY": "y", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
