"""What the agent sends passes the control plane's own validation (when it is installed).

The agent package never imports Django; this test does, and is skipped without it, so the
two sides of docs/agent-protocol.md cannot drift apart unnoticed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llmgw_agent.collectors import Roots, run_collectors
from llmgw_agent.config import load_config
from llmgw_agent.payload import build_heartbeat, collect_heartbeat, collect_registration

from tests.agent.helpers import FakeStatfs, host_roots, write_mountinfo

EXAMPLE = Path(__file__).parents[2] / "agent" / "agent.example.yaml"


def _serializers() -> Any:
    pytest.importorskip("rest_framework")
    try:
        from llmgw.inventory.api import agent_serializers
    except Exception as exc:  # noqa: BLE001 - no server in this checkout: nothing to check
        pytest.skip(f"control plane not importable: {exc}")
    return agent_serializers


def _valid(serializer: Any) -> None:
    assert serializer.is_valid(), serializer.errors


def test_registration_and_heartbeat_pass_server_validation(real_tmp: Path) -> None:
    s = _serializers()
    config = load_config(EXAMPLE)
    _valid(s.RegisterSerializer(data=collect_registration(config, host_roots())))
    _valid(s.HeartbeatSerializer(data=collect_heartbeat(config, host_roots())))

    models = real_tmp / "models"
    (models / "qwen").mkdir(parents=True)
    (models / "qwen" / "w.safetensors").write_bytes(b"x")
    roots = Roots(
        proc=host_roots().proc,
        cpu_first_sample_s=0,
        model_dirs=(str(models),),
        mounts=write_mountinfo(real_tmp / "mountinfo", [("0:50", str(models), "nfs4", "f:/m")]),
        statfs=lambda _: FakeStatfs(f_bavail=1, f_blocks=2),
    )
    data, results = run_collectors(roots, part="heartbeat")
    payload = build_heartbeat("n1", data=data, collectors=results)
    assert payload["filesystems"][0]["shared"] is True
    _valid(s.HeartbeatSerializer(data=payload))
