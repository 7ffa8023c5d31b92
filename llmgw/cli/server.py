"""Commands that run beside the control plane, on its database."""

from __future__ import annotations

import logging
import os
import sys

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

    from llmgw.catalog.loader import CatalogError
    from llmgw.serving import services as serving

    try:
        counts = serving.apply_catalog(Path(path))
    except CatalogError as exc:
        print(f"{path}: refused, nothing applied:", file=sys.stderr)
        for error in exc.errors:
            print(f"  {error}", file=sys.stderr)
        return 1
    budgets = f", {counts['budgets']} power budgets" if "budgets" in counts else ""
    print(
        f"{path}: applied {counts['models']} models, {counts['profiles']} profiles, {counts['engines']} engines{budgets}"
    )
    # What this apply changed, so a re-apply that moved nothing says so and
    # one that kept a count set at run time says which and why.
    for line in counts["changes"]:
        print(f"  {line}")
    if not counts["changes"]:
        print("  no model, profile or engine changed")
    return 0


def worker_command(concurrency: int) -> int:
    """A worker and the periodic schedule. With a broker, a Celery worker,
    and the schedule sent from this process only while it holds the
    cluster's schedule lock (however many workers run, each task is sent
    once per interval). In the embedded default there is no broker: the
    same schedule runs here, calling each task directly."""
    import threading

    from llmgw import schedule
    from llmgw.celery import app

    app.loader.import_default_modules()
    eager = settings.CELERY_TASK_ALWAYS_EAGER
    tasks = {
        name: (app.tasks[entry["task"]].apply if eager else app.tasks[entry["task"]].delay,
               float(entry["schedule"]))
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items()
    }  # fmt: skip
    stop = threading.Event()
    if eager:
        log.info("embedded worker: running %d periodic tasks in-process", len(tasks))
        try:
            schedule.run(tasks, schedule.AlwaysHeld(), stop)
        finally:
            stop.set()
        return 0
    beat = threading.Thread(
        target=schedule.run,
        args=(tasks, schedule.ClusterLock(settings.REDIS_URL), stop),
        name="schedule",
        daemon=True,
    )
    beat.start()
    try:
        app.worker_main(
            ["worker", "--loglevel=INFO", f"--concurrency={concurrency}", "--without-gossip"]
        )
    finally:
        stop.set()
        beat.join(timeout=5)
    return 0
