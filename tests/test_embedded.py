"""The embedded default: nothing set, SQLite, tasks in-process. Run in a
subprocess so the rest of the suite stays on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_embedded_default_migrates_and_answers(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["LLMGW_DATA_DIR"] = str(tmp_path)
    script = (
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from django.core.management import call_command\n"
        "assert settings.DATABASES['default']['ENGINE'].endswith('sqlite3')\n"
        "assert settings.CELERY_TASK_ALWAYS_EAGER\n"
        "assert 'InMemory' in settings.CHANNEL_LAYERS['default']['BACKEND']\n"
        "call_command('migrate', verbosity=0)\n"
        "from llmgw.inventory import services\n"
        "token = services.add_node('n1', 'test')\n"
        "assert services.join('n1', token).startswith('n1.')\n"
        "from llmgw.inventory.tasks import mark_missed_heartbeats\n"
        "assert mark_missed_heartbeats.delay().get() == []\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "DJANGO_SETTINGS_MODULE": "llmgw.settings"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert (tmp_path / "llmgw.sqlite3").exists()
    assert oct((tmp_path / "secret_key").stat().st_mode & 0o777) == "0o600"


def test_a_malformed_setting_stops_the_process_with_its_name(tmp_path):
    env = {
        **os.environ,
        "DEBUG": "ture",
        "LLMGW_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "llmgw.settings",
    }
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "DEBUG='ture'" in out.stderr
