"""A desired-state rewrite of many nodes beside a heartbeat batch being
written: both take the nodes' row locks in name order, so one waits for
the other and neither deadlocks (at 5,000 nodes they did, failing either
the catalog's rewrite or a batch of live nodes' heartbeats)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from llmgw.inventory import heartbeats
from llmgw.inventory.models import Node
from llmgw.serving import desired
from tests.inventory.test_heartbeat_batch import joined
from tests.payloads import heartbeat

pytestmark = pytest.mark.django_db(transaction=True)


def _waiting_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            [pid],
        )
        return bool(cursor.fetchone()[0])


def test_a_rewrite_of_many_nodes_waits_for_a_batch_instead_of_deadlocking(make_node):
    # Keys in the opposite order to names: an UPDATE led by its plan (key
    # order here) and a batch led by names would lock them crosswise.
    names = [f"gpu-{i}" for i in reversed(range(6))]
    digests = dict(zip(names, [joined(make_node, name)[1] for name in names], strict=True))
    first, last = min(names), max(names)
    now = timezone.now()
    batch_holds_first, rewrite_waits = threading.Event(), threading.Event()
    rewrite_pid: list[int] = []
    errors: list[BaseException] = []

    def batch() -> None:
        # One batch's statement locks its rows one by one in name order; here
        # it is caught between its first row and its last.
        try:
            with transaction.atomic():
                heartbeats.store_many([(first, digests[first], heartbeat(first), now)])
                batch_holds_first.set()
                assert rewrite_waits.wait(30)
                heartbeats.store_many([(last, digests[last], heartbeat(last), now)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            batch_holds_first.set()
            connection.close()

    def rewrite() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                rewrite_pid.append(cursor.fetchone()[0])
            assert batch_holds_first.wait(30)
            desired.rebuild()  # every node, as a catalog change does
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=batch), threading.Thread(target=rewrite)]
    for thread in threads:
        thread.start()
    try:
        assert batch_holds_first.wait(30)
        deadline = time.monotonic() + 30
        while not (rewrite_pid and _waiting_for_a_lock(rewrite_pid[0])):
            assert time.monotonic() < deadline, "the rewrite never waited for the batch"
            time.sleep(0.05)
    finally:
        rewrite_waits.set()
        for thread in threads:
            thread.join(60)
    assert not errors
    assert Node.objects.get(name=last).last_heartbeat_at == now
