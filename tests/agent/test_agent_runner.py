"""The runner: each collector timed, a failure isolated and reported; the payloads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from llmgw_agent.collectors import REGISTRY, Roots, run_collectors
from llmgw_agent.collectors.registry import Collector
from llmgw_agent.protocol.build import build_heartbeat, build_registration

from tests.agent.helpers import host_roots


def _broken(roots: Roots) -> dict[str, Any]:
    raise PermissionError("/proc/meminfo: denied")


def test_a_failing_collector_is_isolated_and_reported() -> None:
    registry = dict(REGISTRY)
    registry["memory"] = Collector("memory", "heartbeat", _broken)
    data, results = run_collectors(host_roots(), part="heartbeat", registry=registry)
    by_name = {r["name"]: r for r in results}
    assert by_name["memory"]["ok"] is False
    assert by_name["memory"]["error"] == "PermissionError: /proc/meminfo: denied"
    # The others still produced their data; the failed part is absent, not zeroed.
    assert "memory" not in data
    assert data["cpu"]["load"] == [0.23, 0.33, 0.18]
    assert by_name["cpu"]["ok"] is True and by_name["cpu"]["error"] is None
    assert all(isinstance(r["seconds"], float) for r in results)
    heartbeat = msgspec.to_builtins(build_heartbeat("n1", data=data, collectors=results))
    assert "memory" not in heartbeat
    assert heartbeat["collectors"] == results


def test_switched_off_collector_does_not_run() -> None:
    data, results = run_collectors(host_roots(), enabled={"cpu": False, "weights": False})
    names = {r["name"] for r in results}
    assert {"system", "memory", "filesystems"} <= names and not {"cpu", "weights"} & names
    assert "cpu" not in data and "weights" not in data


def test_registration_builder_from_synthetic_data() -> None:
    # The simulator's path: no machine, just data.
    payload = msgspec.to_builtins(
        build_registration(
            "sim-001",
            system={"cpus": 64, "memory_total_bytes": 512 * 2**30},
            labels={"llmgw.io/rack": "r1"},
            simulated=True,
            gpus=[{"index": 0, "class": "H100-80GB"}],
            agent_version="0.1.0",
        )
    )
    assert payload["schema"] == 1 and payload["simulated"] is True
    assert payload["system"]["cpus"] == 64
    assert payload["system"]["os"] is None  # unknown, never zero
    assert payload["gpus"] == [{"index": 0, "class": "H100-80GB"}]
    assert "fabrics" not in payload


def test_heartbeat_builder_time_format() -> None:
    when = datetime(2026, 11, 30, 4, 0, 0, tzinfo=UTC)
    cpu = {"utilization_percent": None, "load": [0.0, 0.0, 0.0]}
    payload = build_heartbeat("n1", data={"cpu": cpu, "junk": 1}, sent_at=when)
    assert msgspec.json.decode(msgspec.json.encode(payload)) == {
        "schema": 1,
        "node": "n1",
        "sent_at": "2026-11-30T04:00:00Z",
        "cpu": cpu,
        "collectors": [],
    }
