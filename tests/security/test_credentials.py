"""Credentials: every secret file 0600 from the moment it exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# -- secret files 0600 from creation ---------------------------------------

_NO_CHMOD = (
    "import os, pathlib\n"
    "def refuse(*a, **k):\n"
    "    raise AssertionError(f'chmod after creation: {a}')\n"
    "os.chmod = os.fchmod = os.lchmod = pathlib.Path.chmod = refuse\n"
)


def run_embedded(data: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"LLMGW_DATA_DIR": str(data), "DJANGO_SETTINGS_MODULE": "llmgw.settings"}
    return subprocess.run(
        [sys.executable, "-c", _NO_CHMOD + "import django; django.setup()\n" + script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_the_embedded_data_and_every_secret_in_it_are_private_from_creation(tmp_path):
    data = tmp_path / "var"
    cli = data / "cli.yaml"
    out = run_embedded(
        data,
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        f"call_command('bootstrap_admin', cli_config=pathlib.Path({str(cli)!r}))\n",
    )
    assert out.returncode == 0, out.stderr
    assert mode(data) == "0o700"
    for name in ("llmgw.sqlite3", "secret_key", "cli.yaml"):
        assert mode(data / name) == "0o600", name
    for extra in data.glob("llmgw.sqlite3-*"):
        assert mode(extra) == "0o600", extra.name


def test_the_demo_writes_no_file_before_its_umask_and_chmods_none():
    """deploy/demo.sh makes the data directory, the CLI config, the join
    token, Prometheus's copy of the API token and the gateway key: all under
    `umask 077`, set before its first write, none chmod-ed after the fact."""
    lines = [line.strip() for line in (ROOT / "deploy/demo.sh").read_text().splitlines()]
    code = [line for line in lines if line and not line.startswith("#")]
    assert "umask 077" in code
    first_write = next(
        i for i, line in enumerate(code) if re.search(r"(^|\s)(mkdir|>|touch)\s", line)
    )
    assert code.index("umask 077") < first_write, "the demo writes before its umask"
    chmods = [line for line in code if re.search(r"(^|[\s;(])chmod\s", line)]
    assert not chmods, f"a file made open and closed afterwards: {chmods}"
