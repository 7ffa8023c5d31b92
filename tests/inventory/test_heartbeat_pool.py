"""Heartbeats keep being stored while requests hold every connection of
their pool (llmgw.database.own): at 5,000 nodes, eight placements queued
on one model's row lock held the web process's eight, the heartbeat
writer waited behind them, and thousands of nodes went NotReady."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection

from llmgw.inventory import services
from llmgw.inventory.api.heartbeat_asgi import PATH
from llmgw.inventory.models import Node
from tests.inventory.lean_path import post
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db(transaction=True)


def hold_every_connection(release: threading.Event) -> list[threading.Thread]:
    """Threads that each take one of the requests' pooled connections, as a
    request does, and keep it until `release`."""
    taken = threading.Semaphore(0)

    def hold() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            taken.release()
            release.wait(60)
        finally:
            connection.close()

    connection.close()  # this thread's own, back to the pool for the holders
    threads = [threading.Thread(target=hold) for _ in range(django_settings.DATABASE_POOL_MAX)]
    for thread in threads:
        thread.start()
    for _ in threads:
        assert taken.acquire(timeout=10), "the pool did not hand out all its connections"
    return threads


def test_a_heartbeat_is_stored_while_requests_hold_every_pooled_connection(make_node: Any):
    node, credential = make_node("gpu-1")
    services.register(node, registration("gpu-1"), None)
    release = threading.Event()
    holders = hold_every_connection(release)
    try:
        # Answered while they still hold them: a writer waiting on their
        # pool gets none, and after its timeout the heartbeat fails.
        done = post(
            PATH,
            json.dumps(heartbeat("gpu-1")).encode(),
            [(b"authorization", f"Node {credential}".encode())],
        )
    finally:
        release.set()
        for thread in holders:
            thread.join(10)
    start, body = done["sent"]
    assert start["status"] == 200, body
    assert json.loads(body["body"])["state"] == "Ready"
    assert Node.objects.get(name="gpu-1").cpu_utilization_percent == 12.5
