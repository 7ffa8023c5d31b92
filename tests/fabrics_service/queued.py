"""The worker's part of a fabric map, for tests that run none: each
ibnetdiscover answer is queued through the real broker (Redis) by the web
process that heard it (fabrics.tasks.map_in_a_worker); this takes those
messages off the queue and runs their task, as a worker would."""

from __future__ import annotations

import base64
import json

import redis
from django.conf import settings

from llmgw.fabrics import tasks

QUEUE = "celery"  # Celery's default queue: the project routes nothing elsewhere
TASK = "llmgw.fabrics.tasks.store_fabric_map"


def run_queued_maps() -> list[int]:
    """Run every queued store_fabric_map; the commands' keys, in order."""
    queue = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    done = []
    for raw in queue.lrange(QUEUE, 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] != TASK:
            continue
        if not queue.lrem(QUEUE, 1, raw):
            continue  # taken meanwhile
        [command_id], _, _ = json.loads(base64.b64decode(message["body"]))
        tasks.store_fabric_map(command_id)
        done.append(command_id)
    return done
