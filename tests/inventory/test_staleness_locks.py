"""The staleness pass beside heartbeat batches being written: it must not
wait for (or deadlock with) a batch's row locks, and it reports exactly
the nodes it marked."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from llmgw.inventory import heartbeats, services
from llmgw.inventory.models import Node
from tests.inventory.test_heartbeat_batch import joined
from tests.payloads import heartbeat

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_node_whose_heartbeat_is_being_written_is_not_marked_silent(make_node):
    _, digest = joined(make_node, "gpu-1")
    joined(make_node, "gpu-2")
    now = timezone.now()
    Node.objects.update(state="Ready", last_heartbeat_at=now - timedelta(minutes=5))
    locked, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def batch_in_flight() -> None:
        # A web process's batch that has updated gpu-1's row and not yet
        # committed: the row is locked, its new heartbeat not yet visible.
        try:
            with transaction.atomic():
                heartbeats.store_many([("gpu-1", digest, heartbeat("gpu-1"), now)])
                locked.set()
                release.wait(30)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            locked.set()
            connection.close()

    writer = threading.Thread(target=batch_in_flight)
    writer.start()
    try:
        assert locked.wait(30)
        with connection.cursor() as cursor:
            # Waiting for the batch's lock fails here instead of hanging.
            cursor.execute("SET lock_timeout = '5s'")
        try:
            marked = services.mark_missed_heartbeats(now)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
    finally:
        release.set()
        writer.join(30)
    assert not errors
    assert marked == ["gpu-2"]
    states = dict(Node.objects.values_list("name", "state"))
    assert states == {"gpu-1": "Ready", "gpu-2": "NotReady"}
    # Heard now, gpu-1 is not silent on the next pass either.
    assert services.mark_missed_heartbeats(now + timedelta(seconds=5)) == []
