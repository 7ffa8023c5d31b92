"""What the agent sends is what the control plane decodes.

Both sides read one set of structs (llmgw_agent.protocol): the agent builds its payloads
with them and the server decodes into them, so this checks that what the collectors
measure on this machine fits them, sent as JSON and read back whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from llmgw_agent.collectors import Roots, run_collectors
from llmgw_agent.config import load_config
from llmgw_agent.payload import collect_heartbeat, collect_registration
from llmgw_agent.protocol.build import build_heartbeat
from llmgw_agent.protocol.errors import field_errors
from llmgw_agent.protocol.messages import Heartbeat, Registration

from tests.agent.helpers import FakeStatfs, host_roots, write_mountinfo

EXAMPLE = Path(__file__).parents[2] / "agent" / "agent.example.yaml"


def _valid(payload: Any) -> None:
    kind = type(payload)
    sent = msgspec.json.encode(payload)
    assert msgspec.json.decode(sent, type=kind) == payload
    assert field_errors(msgspec.json.decode(sent), kind) == {}


def test_registration_and_heartbeat_pass_server_validation(real_tmp: Path) -> None:
    config = load_config(EXAMPLE)
    registration = collect_registration(config, host_roots())
    assert isinstance(registration, Registration)
    _valid(registration)
    heartbeat = collect_heartbeat(config, host_roots())
    assert isinstance(heartbeat, Heartbeat)
    _valid(heartbeat)

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
    assert payload.filesystems[0].shared is True
    _valid(payload)
