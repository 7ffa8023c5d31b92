"""deploy/onboard-node.sh, deploy/provision-node.sh and the agent's systemd unit:
parsed (bash -n, shellcheck where installed), dry-run, and what they would do read
back: the agent.yaml the onboarding writes loads in the agent, the unit starts the
agent the onboarding installs, and `systemd-analyze verify` finds nothing wrong."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from llmgw_agent.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
ONBOARD, PROVISION = ROOT / "deploy/onboard-node.sh", ROOT / "deploy/provision-node.sh"
UNIT = ROOT / "deploy/systemd/llmgw-agent.service"
SERVER = "https://llmgw.example.internal:8443"


def bash(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=60, cwd="/"
    )


def release(folder: Path, corrupt: str | None = None) -> Path:
    """A release folder: files and the SHA256SUMS of them (a dry run reads them only to
    check them, so their bytes need not be a working wheel)."""
    folder.mkdir()
    names = ["llmgw_agent-0.1.0-py3-none-any.whl", "httpx-0.28.1-py3-none-any.whl"]
    lines = []
    for name in names:
        data = f"the bytes of {name}\n".encode()
        (folder / name).write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
    (folder / "SHA256SUMS").write_text("".join(lines))
    if corrupt:
        (folder / corrupt).write_bytes(b"changed after the sums were taken\n")
    return folder


@pytest.mark.parametrize("script", [ONBOARD, PROVISION])
def test_the_scripts_parse(script: Path) -> None:
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (deploy/services.sh installs it)")
    checked = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


def test_onboarding_dry_run_checks_the_release_and_prints_what_it_would_do(
    tmp_path: Path,
) -> None:
    done = bash(ONBOARD, "--node", "gpu-a-01", "--host", "root@10.0.0.21", "--server", SERVER,
                "--release", str(release(tmp_path / "rel")), "--dry-run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "release checked: 2 files match SHA256SUMS" in out
    commands = [line for line in out.splitlines() if line.startswith("+ ")]
    assert re.fullmatch(r"\+ llmgw node add gpu-a-01 --cert --out /\S+/cert", commands[0])
    assert [c.split()[1] for c in commands[1:]] == ["ssh", "scp", "scp", "ssh"]
    assert all(" root@10.0.0.21" in c for c in commands[1:])
    script = out.split("'<script below>'\n", 1)[1]
    assert "--no-index --find-links /var/tmp/llmgw-onboard llmgw-agent" in script
    assert "systemctl enable --now llmgw-agent.service" in script
    assert out.rstrip().endswith("dry run: nothing was issued, copied or started")

    # The agent.yaml it writes loads in the agent, as an mTLS node of that name.
    yaml_text = out.split("agent.yaml for gpu-a-01:\n", 1)[1].split("\n+ ", 1)[0]
    config = parse_config("\n".join(line[2:] for line in yaml_text.splitlines()))
    assert (config.node, config.server_url) == ("gpu-a-01", SERVER)
    assert config.cert_file == Path("/var/lib/llmgw-agent/node.pem")
    assert config.key_file == Path("/var/lib/llmgw-agent/node.key")
    assert config.ca_file == Path("/etc/llmgw-agent/ca.pem")
    # Where the remote script installs them.
    assert (
        "install -m 0600 /var/tmp/llmgw-onboard/node.pem /var/tmp/llmgw-onboard/node.key /var/lib/llmgw-agent/"
        in script
    )
    assert (
        "/var/tmp/llmgw-onboard/agent.yaml /var/tmp/llmgw-onboard/ca.pem /etc/llmgw-agent/"
        in script
    )


def test_onboarding_refuses_a_release_whose_checksums_do_not_match(tmp_path: Path) -> None:
    rel = release(tmp_path / "rel", corrupt="httpx-0.28.1-py3-none-any.whl")
    done = bash(ONBOARD, "--node", "gpu-a-01", "--host", "h", "--server", SERVER,
                "--release", str(rel), "--dry-run")  # fmt: skip
    assert done.returncode == 1
    assert "httpx-0.28.1-py3-none-any.whl: FAILED" in done.stdout
    assert "checksums do not match SHA256SUMS; nothing was installed" in done.stderr
    assert "+ " not in done.stdout


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (["--node", "gpu a"], "--node: 'gpu a' is not a node name"),
        (
            ["--server", "http://llmgw:8000"],
            "--server: 'http://llmgw:8000' must be an https:// URL",
        ),
        (["--release", "/nonexistent"], "'/nonexistent' is neither a folder nor an https:// URL"),
    ],
)
def test_onboarding_names_the_bad_argument(tmp_path: Path, change: list[str], error: str) -> None:
    args = {"--node": "gpu-a-01", "--host": "h", "--server": SERVER,
            "--release": str(release(tmp_path / "rel"))}  # fmt: skip
    args[change[0]] = change[1]
    done = bash(ONBOARD, *[word for pair in args.items() for word in pair], "--dry-run")
    assert done.returncode == 1
    assert error in done.stderr


def test_provisioning_prints_the_qm_commands_by_default(tmp_path: Path) -> None:
    key = tmp_path / "id.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDv ops@bastion\n")
    done = bash(PROVISION, "--vmid", "210", "--name", "gpu-a-01", "--template", "9000",
                "--cores", "32", "--memory", "262144", "--disk", "200", "--ip", "10.0.0.21/24",
                "--gateway", "10.0.0.1", "--ssh-key", str(key), "--gpu", "0000:41:00.0",
                "--gpu", "0000:42:00.0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert commands == [
        "+ qm clone 9000 210 --name gpu-a-01 --full 1 --storage local-lvm",
        # The host's CPU: Proxmox's default kvm64 hides AVX2, which the agent warns about.
        "+ qm set 210 --cores 32 --cpu host --memory 262144 --net0 virtio,bridge=vmbr0",
        f"+ qm set 210 --ipconfig0 ip=10.0.0.21/24,gw=10.0.0.1 --sshkeys {key} --ciuser root",
        "+ qm resize 210 scsi0 200G",
        "+ qm set 210 --machine q35",
        "+ qm set 210 --hostpci0 0000:41:00.0,pcie=1",
        "+ qm set 210 --hostpci1 0000:42:00.0,pcie=1",
        "+ qm start 210",
    ]
    assert "dry run: nothing was changed" in done.stdout
    assert "deploy/onboard-node.sh --node gpu-a-01 --host root@10.0.0.21" in done.stdout


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (["--vmid", "42"], "--vmid: '42' must be a whole number, at least 100"),
        (["--name", "gpu_a"], "--name: 'gpu_a' must be a host name"),
        (["--ip", "10.0.0.21"], "--ip: '10.0.0.21' must be an IPv4 address with its prefix"),
        (["--gpu", "gpu0"], "--gpu: 'gpu0' is not a PCI address"),
        (["--cpu", "host;reboot"], "--cpu: 'host;reboot' is not a CPU type"),
    ],
)
def test_provisioning_names_the_bad_argument(tmp_path: Path, change: list[str], error: str) -> None:
    key = tmp_path / "id.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDv ops@bastion\n")
    args = {"--vmid": "210", "--name": "gpu-a-01", "--template": "9000", "--ip": "10.0.0.21/24",
            "--gateway": "10.0.0.1", "--ssh-key": str(key)}  # fmt: skip
    args[change[0]] = change[1]
    done = bash(PROVISION, *[word for pair in args.items() for word in pair])
    assert done.returncode == 1
    assert error in done.stderr
    assert "+ qm" not in done.stdout


def test_provisioning_applies_only_where_qm_is(tmp_path: Path) -> None:
    key = tmp_path / "id.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDv ops@bastion\n")
    done = subprocess.run(
        ["bash", str(PROVISION), "--vmid", "210", "--name", "gpu-a-01", "--template", "9000",
         "--ip", "10.0.0.21/24", "--gateway", "10.0.0.1", "--ssh-key", str(key), "--apply"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "QM": "qm-not-here"},
    )  # fmt: skip
    assert done.returncode == 1
    assert "qm-not-here: not found: run this on the Proxmox host" in done.stderr


def verify_unit(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` on the unit as installed in a root of its own: this
    machine's system units, and the unit's ExecStart as an executable file (verify
    refuses a unit whose program is missing, and the agent is not installed here)."""
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    program = Path(re.search(r"^ExecStart=(\S+)", unit_text, re.M)[1])  # type: ignore[index]
    (root / program.relative_to("/")).parent.mkdir(parents=True)
    (root / program.relative_to("/")).write_text("#!/bin/sh\n")
    (root / program.relative_to("/")).chmod(0o755)
    installed = root / "etc/systemd/system/llmgw-agent.service"
    installed.parent.mkdir(parents=True)
    installed.write_text(unit_text)
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", str(installed)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or not Path("/usr/lib/systemd/system").is_dir(),
    reason="systemd-analyze is not installed (Debian's systemd package has it)",
)
def test_the_agent_unit_verifies(tmp_path: Path) -> None:
    text = UNIT.read_text()
    done = verify_unit(text, tmp_path / "good")
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    # The check can fail: verify reports a misspelt setting (and exits 0 all the same).
    bad = verify_unit(text.replace("KillMode=process", "KillMode=proces"), tmp_path / "bad")
    assert "Failed to parse kill mode specification" in bad.stderr
    # It starts the agent the onboarding installs, with the agent.yaml it writes.
    assert "ExecStart=/opt/llmgw-agent/bin/llmgw-agent --config /etc/llmgw-agent/agent.yaml" in text
    assert "python3 -m venv /opt/llmgw-agent" in ONBOARD.read_text()
    # Engines outlive an agent restart (the agent's own promise): only it is stopped.
    assert "KillMode=process" in text
