"""The web process's collector settings (llmgw/heap.py) hold once the app
is imported, as uvicorn imports it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_served_app_freezes_its_imports_and_collects_young_objects_less_often():
    code = (
        "import gc; import llmgw.asgi; print(gc.get_threshold()[0], gc.get_freeze_count() > 10_000)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "llmgw.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["50000", "True"]
