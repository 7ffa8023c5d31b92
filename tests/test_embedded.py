"""The embedded default: nothing set, the control plane's own PostgreSQL
(llmgw.embedded_db), tasks in-process. Run in a subprocess so the rest of
the suite stays on its own database: it starts the server, migrates,
places a model and explains a placement on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llmgw import embedded_db
from tests.embedded import reachable

ROOT = Path(__file__).resolve().parent.parent


SCRIPT = r"""
import django; django.setup()
from django.conf import settings
from django.core.management import call_command
from django.db import connection
assert settings.DATABASES['default']['ENGINE'] == 'llmgw.database'
assert settings.CELERY_TASK_ALWAYS_EAGER
assert 'InMemory' in settings.CHANNEL_LAYERS['default']['BACKEND']
call_command('migrate', verbosity=0)
assert connection.vendor == 'postgresql'
print(connection.cursor().connection.info.host)
from llmgw.inventory import services
assert services.join('n1', services.add_node('n1', 'test')).startswith('n1.')
from llmgw.inventory.tasks import mark_missed_heartbeats
assert mark_missed_heartbeats.delay().get() == []
from django.utils import timezone
from llmgw.catalog import services as catalog
from llmgw.inventory.models import Node
from llmgw.serving import placing
for name, gib in (('big', 64), ('small', 8)):
    Node.objects.create(name=name, state='Ready', last_heartbeat_at=timezone.now(),
                        cpus=16, memory_total_bytes=gib * 2**30)
catalog.apply_text('''
models:
  - name: m
    source: hf://x/m
    profiles:
      - name: cpu
        memory_gb: 20
        cpu_cores: 2
''')
replica, _ = placing.place_replica('m')
assert replica.shards.get().node.name == 'big'
text = placing.explain('m')['text']
assert 'small has 8' in text and 'of memory, none of it claimed, needs 20' in text, text
from django.contrib.auth.models import User
from django.test import Client
admin = Client()
admin.force_login(User.objects.create_superuser('admin', password='x' * 20))
page = admin.get('/admin/').content.decode()
assert f'database: embedded PostgreSQL in {settings.DATA_DIR / "postgres"}' in page, page
"""


def run(data: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(LLMGW_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="llmgw.settings")
    return subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def server_log(data: Path) -> str:
    log = data / "postgres" / "server.log"
    return "\n--- server.log\n" + log.read_text()[-3000:] if log.exists() else ""


def test_the_embedded_default_starts_migrates_places_and_explains(tmp_path):
    data = reachable(tmp_path) / "var"
    try:
        out = run(data, SCRIPT)
        assert out.returncode == 0, out.stdout + out.stderr + server_log(data)
        # The connection went to the server's socket in the data directory.
        assert out.stdout.split()[0] == str(data / "postgres")
        assert (data / "postgres" / "PG_VERSION").exists()
        assert embedded_db.is_running(data)
        # A second process finds it running, and its data there.
        again = run(
            data,
            "import django; django.setup()\n"
            "from llmgw.inventory.models import Node\nprint(Node.objects.count())",
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "3"
    finally:
        embedded_db.stop(data)
    assert not embedded_db.is_running(data)
    if os.geteuid() == 0:
        # A process on DATABASE_URL that shares the data directory leaves it
        # open to the server's account: closed, the next start would fail.
        assert oct(data.stat().st_mode & 0o777) == "0o710"
        shared = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()"],
            env={
                **os.environ,
                "LLMGW_DATA_DIR": str(data),
                "DJANGO_SETTINGS_MODULE": "llmgw.settings",
            },
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shared.returncode == 0, shared.stderr
        assert oct(data.stat().st_mode & 0o777) == "0o710"
    assert oct((data / "secret_key").stat().st_mode & 0o777) == "0o600"


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


def test_the_admin_page_says_which_database_it_uses(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert "database: PostgreSQL at " in page
    assert "password" not in page.split("database:")[1].split("<")[0]
