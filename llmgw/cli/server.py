"""Commands that run beside the control plane, on its database."""

from __future__ import annotations

import logging
import os
import sys
import time

from django.conf import settings

from llmgw.inventory import services

log = logging.getLogger("llmgw.worker")


def node_command(action: str, name: str) -> int:
    actor = os.environ.get("USER", "cli")
    try:
        if action == "add":
            token = services.add_node(name, actor)
            # The token alone on stdout, so `llmgw node add NAME > token`
            # writes a file the agent's join_token_file can read as it is;
            # the words for the person go to stderr.
            hours = settings.JOIN_TOKEN_TTL_S // 3600
            print(f"node {name} added. Its one-time join token (valid {hours} h):", file=sys.stderr)
            print(token)
            print(
                "Put it in the agent's join_token_file; the agent trades it for its own credential.",
                file=sys.stderr,
            )
        elif action == "revoke":
            services.revoke_node(name, actor)
            print(f"node {name}: credential revoked; its agent is refused from now on")
    except services.InventoryError as exc:
        print(f"llmgw node {action}: {exc}", file=sys.stderr)
        return 1
    return 0


def catalog_command(path: str) -> int:
    from pathlib import Path

    from llmgw.catalog import services as catalog
    from llmgw.catalog.loader import CatalogError

    try:
        counts = catalog.apply_file(Path(path))
    except CatalogError as exc:
        print(f"{path}: refused, nothing applied:", file=sys.stderr)
        for error in exc.errors:
            print(f"  {error}", file=sys.stderr)
        return 1
    print(
        f"{path}: applied {counts['models']} models, {counts['profiles']} profiles, {counts['engines']} engines"
    )
    return 0


def worker_command(concurrency: int) -> int:
    """With a broker, a real Celery worker with beat. In the embedded
    default there is no broker: run the same beat schedule in this
    process, calling each task directly."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        from llmgw.celery import app

        app.worker_main(
            [
                "worker",
                "--beat",
                "--loglevel=INFO",
                f"--concurrency={concurrency}",
                "--without-gossip",
            ]
        )
        return 0
    from llmgw.celery import app

    app.loader.import_default_modules()
    schedule = {
        name: (entry["task"], float(entry["schedule"]))
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items()
    }
    due = dict.fromkeys(schedule, 0.0)
    log.info("embedded worker: running %d periodic tasks in-process", len(schedule))
    while True:
        now = time.monotonic()
        for name, (task, every) in schedule.items():
            if now >= due[name]:
                due[name] = now + every
                try:
                    app.tasks[task].apply()
                except Exception:
                    log.exception("periodic task %s failed", name)
        time.sleep(max(0.2, min(due.values()) - time.monotonic()))
