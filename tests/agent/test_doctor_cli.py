"""`llmgw doctor` run as a command on this machine against the real control plane under
uvicorn: every check is printed, the ones about hardware this machine lacks say unknown
with the reason, and the control plane's checks (credential, clock) answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = ("ib ports", "subnet manager", "fabric names", "nvlink fabric", "imex", "engines",
          "model filesystems", "clock skew", "credential")  # fmt: skip


def doctor(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    llmgw = Path(sys.executable).with_name("llmgw")
    return subprocess.run(
        [str(llmgw), "doctor", "--config", str(config), *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def agent_yaml(tmp_path: Path, url: str, credential: str, node: str = "gpu-1") -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "credential").write_text(credential + "\n")
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "w.gguf").write_bytes(b"x" * 4096)
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"server_url: {url}\nnode: {node}\ncredential_file: {tmp_path / 'credential'}\n"
        f"model_dirs: [{tmp_path / 'models'}]\nengines_dir: {tmp_path / 'engines'}\n"
    )
    return config


def test_doctor_prints_every_check_on_this_machine(
    asgi_server: str, make_node: Any, tmp_path: Path
) -> None:
    _, credential = make_node("gpu-1")
    done = doctor(agent_yaml(tmp_path, asgi_server, credential))
    out = done.stdout
    assert done.stderr == "" or "Traceback" not in done.stderr, done.stderr
    lines = out.splitlines()
    assert lines[0].split() == ["CHECK", "RESULT", "DETAIL"] and "WHAT TO DO" in lines[1]
    rows = {c: next(x for x in lines if x.startswith(c + " ")) for c in CHECKS}
    assert "OK" in rows["credential"] and "accepted as node gpu-1" in rows["credential"]
    assert "OK" in rows["clock skew"] and "s against the control plane" in rows["clock skew"]
    assert "1 model(s)" in rows["model filesystems"]
    # No InfiniBand, no GPU here (as on any CI machine): unknown, with the reason.
    for name in ("ib ports", "nvlink fabric", "imex"):
        assert "UNKNOWN" in rows[name] and "not present" in rows[name], rows[name]
    assert done.returncode == 0, out

    as_json = json.loads(
        doctor(agent_yaml(tmp_path / "j", asgi_server, credential), "--json").stdout
    )
    assert [c["name"] for c in as_json["checks"]] == list(CHECKS)
    assert as_json["failed"] is False
    assert {c["result"] for c in as_json["checks"]} <= {"ok", "warn", "unknown"}


def test_a_revoked_credential_fails_doctor(
    asgi_server: str, make_node: Any, tmp_path: Path
) -> None:
    from llmgw.inventory import services

    _, credential = make_node("gpu-1")
    services.revoke_node("gpu-1", "test")
    done = doctor(agent_yaml(tmp_path, asgi_server, credential), "--json")
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["credential"]["result"] == "fail"
    assert "llmgw node add gpu-1" in checks["credential"]["action"]


def test_clock_skew_against_the_live_control_plane(asgi_server: str, make_node: Any) -> None:
    import time

    from llmgw_agent.doctor.gather import ask_control_plane
    from llmgw_agent.doctor.host import clock_skew

    _, credential = make_node("gpu-1")
    near = ask_control_plane([asgi_server], credential)
    assert near.status == 200 and near.offset_s is not None
    assert clock_skew(near.offset_s, rtt_s=near.rtt_s).result == "ok"
    # This node's clock 45 s ahead: the control plane reads 45 s behind it.
    ahead = ask_control_plane([asgi_server], credential, clock=lambda: time.time() + 45)
    assert ahead.offset_s is not None and -46 < ahead.offset_s < -44
    check = clock_skew(ahead.offset_s, rtt_s=ahead.rtt_s)
    assert check.result == "fail" and "chronyc" in check.action
    late = ask_control_plane([asgi_server], credential, clock=lambda: time.time() - 5)
    assert clock_skew(late.offset_s).result == "warn"
