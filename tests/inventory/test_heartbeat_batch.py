"""Heartbeats of many nodes stored in one statement (heartbeat_batch), and
the web process's Coalescer that gathers them: an unchanged heartbeat
still moves its node's last-seen time, free space is a measurement, and a
heartbeat whose credential the statement did not authenticate writes
nothing while the rest of its batch is stored."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from llmgw.accounts import hashing
from llmgw.inventory import coalesce, heartbeats, services
from llmgw.inventory.coalesce import Coalescer
from llmgw.inventory.models import Filesystem, Node
from tests.payloads import heartbeat, registration


def joined(make_node: Any, name: str) -> tuple[Node, str]:
    node, credential = make_node(name)
    services.register(node, registration(name), None)
    return node, hashing.digest(credential.rpartition(".")[2])


def test_unchanged_heartbeats_of_many_nodes_cost_one_statement(make_node):
    nodes = [joined(make_node, f"gpu-{i}") for i in range(20)]
    at = timezone.now()
    batch = [(node.name, digest, heartbeat(node.name), at) for node, digest in nodes]
    heartbeats.store_many(batch)  # the first stores every section
    later = [(name, digest, data, at + timedelta(seconds=10)) for name, digest, data, _ in batch]
    with CaptureQueriesContext(connection) as queries:
        answers = heartbeats.store_many(later)
    assert len(queries.captured_queries) == 1
    assert [a["node"] for a in answers] == [node.name for node, _ in nodes]
    assert all(a["state"] == "Ready" and a["register"] is False for a in answers)
    assert set(Node.objects.values_list("last_heartbeat_at", flat=True)) == {
        at + timedelta(seconds=10)
    }


def test_an_unchanged_heartbeat_keeps_its_node_from_going_stale(make_node, settings):
    """The staleness check reads last_heartbeat_at: a heartbeat that changed
    nothing, stored in a batch, must still move it."""
    node, digest = joined(make_node, "gpu-1")
    t0 = timezone.now() - timedelta(minutes=5)
    heartbeats.store_many([("gpu-1", digest, heartbeat("gpu-1"), t0)])
    t1 = t0 + timedelta(seconds=node.heartbeat_interval_s * settings.MISSED_HEARTBEATS_NOT_READY)
    heartbeats.store_many([("gpu-1", digest, heartbeat("gpu-1"), t1)])
    node.refresh_from_db()
    assert node.last_heartbeat_at == t1
    # A pass one interval later finds it alive; without the second
    # heartbeat's time it would be two intervals past its grace.
    assert services.mark_missed_heartbeats(t1 + timedelta(seconds=node.heartbeat_interval_s)) == []
    node.refresh_from_db()
    assert node.state == "Ready" and services.is_ready(node, t1)


def test_free_space_is_written_in_place_and_a_new_mount_replaces_the_rows(make_node):
    node, digest = joined(make_node, "gpu-1")
    at = timezone.now()
    heartbeats.store_many([("gpu-1", digest, heartbeat("gpu-1"), at)])
    rows = dict(Filesystem.objects.filter(node=node).values_list("mount", "pk"))
    fuller = heartbeat("gpu-1")
    fuller["filesystems"][0]["free_bytes"] -= 2**30
    later = at + timedelta(seconds=10)
    with CaptureQueriesContext(connection) as queries:
        heartbeats.store_many([("gpu-1", digest, fuller, later)])
    assert len(queries.captured_queries) == 1  # not a changed section
    data = Filesystem.objects.get(node=node, mount=fuller["filesystems"][0]["mount"])
    assert data.pk == rows[data.mount]
    assert data.free_bytes == fuller["filesystems"][0]["free_bytes"]
    assert data.reported_at == later
    fewer = heartbeat("gpu-1")
    fewer["filesystems"] = fewer["filesystems"][:1]
    heartbeats.store_many([("gpu-1", digest, fewer, later + timedelta(seconds=10))])
    assert list(Filesystem.objects.filter(node=node).values_list("mount", flat=True)) == [
        fewer["filesystems"][0]["mount"]
    ]


def test_a_heartbeat_its_credential_does_not_authenticate_writes_nothing(make_node):
    node, digest = joined(make_node, "gpu-1")
    other, other_digest = joined(make_node, "gpu-2")
    services.revoke_node("gpu-2", "test")
    at = timezone.now()
    answers = heartbeats.store_many(
        [
            ("gpu-1", hashing.digest("not-the-secret"), heartbeat("gpu-1"), at),
            ("gpu-2", other_digest, heartbeat("gpu-2"), at),
        ]
    )
    assert answers == [None, None]
    assert heartbeats.store_many([("gpu-1", digest, heartbeat("gpu-1"), at)])[0] is not None
    node.refresh_from_db()
    other.refresh_from_db()
    assert node.last_heartbeat_at == at
    assert other.last_heartbeat_at is None and other.cpu_utilization_percent is None
    assert not Filesystem.objects.filter(node=other).exists()


def test_the_coalescer_gathers_a_tick_and_keeps_one_heartbeat_per_node_a_statement():
    batches: list[list[str]] = []

    def store(batch: list[Any]) -> list[Any]:
        batches.append([name for name, *_ in batch])
        return [{"node": name} for name, *_ in batch]

    async def main() -> list[Any]:
        coalescer = Coalescer(tick_s=0.05, store=store)
        at = timezone.now()
        names = ["a", "b", "a", "c", "a"]
        return await asyncio.gather(*(coalescer.submit(n, "h", {}, at) for n in names))

    answers = asyncio.run(main())
    assert [a["node"] for a in answers] == ["a", "b", "a", "c", "a"]
    assert batches == [["a", "b", "c"], ["a"], ["a"]]


def test_the_coalescer_hands_a_failed_write_to_every_heartbeat_of_the_batch():
    def store(batch: list[Any]) -> list[Any]:
        raise ConnectionError("the database went away")

    async def main() -> list[Any]:
        coalescer = Coalescer(tick_s=0.01, store=store)
        at = timezone.now()
        return await asyncio.gather(
            *(coalescer.submit(n, "h", {}, at) for n in "ab"), return_exceptions=True
        )

    assert [type(e) for e in asyncio.run(main())] == [ConnectionError, ConnectionError]


def test_the_coalescer_answers_a_durable_heartbeat_once_its_store_has_run():
    """A heartbeat whose sections changed is answered after its own durable
    store, in its own thread, while the others of its batch are answered at
    once; a durable store that fails fails its heartbeat alone."""
    stored: list[str] = []

    def durable(name: str) -> heartbeats.Durable:
        def store() -> None:
            if name == "bad":
                raise ConnectionError("the database went away")
            stored.append(name)

        return heartbeats.Durable({"node": name}, store)

    def store(batch: list[Any]) -> list[Any]:
        return [durable(n) if n in ("new", "bad") else {"node": n} for n, *_ in batch]

    async def main() -> list[Any]:
        coalescer = Coalescer(tick_s=0.01, store=store, durable_threads=2)
        at = timezone.now()
        answers = asyncio.gather(
            *(coalescer.submit(n, "h", {}, at) for n in ("old", "new", "bad")),
            return_exceptions=True,
        )
        out = await answers
        await coalescer.close()
        return out

    old, new, bad = asyncio.run(main())
    assert old == {"node": "old"} and new == {"node": "new"}
    assert isinstance(bad, ConnectionError)
    assert stored == ["new"]


def test_the_coalescer_says_how_far_behind_its_heartbeats_are():
    """behind_s: the age of the oldest heartbeat not yet answered, and at
    least the wait when the loop that answers them does not run at all
    (what readiness takes for not hearing in time)."""
    release = threading.Event()

    def store(batch: list[Any]) -> list[Any]:
        release.wait(10)
        return [{"node": name} for name, *_ in batch]

    async def main() -> tuple[float, float, float]:
        coalescer = Coalescer(tick_s=0.0, store=store)
        arrived = timezone.now() - timedelta(seconds=7)
        waiting = asyncio.ensure_future(coalescer.submit("a", "h", {}, arrived))
        await asyncio.sleep(0.1)
        now = timezone.now()
        # Asked from another thread, as the hearing thread asks.
        behind = await asyncio.to_thread(coalesce.behind_s, now, 1.0)
        release.set()
        await waiting
        after = await asyncio.to_thread(coalesce.behind_s, timezone.now(), 1.0)
        # The loop itself held up: nothing waits, yet a callback does not run.
        asked = asyncio.get_running_loop().run_in_executor(
            None, coalesce.behind_s, timezone.now(), 0.3
        )
        time.sleep(0.6)  # the loop blocked, as a starved one is
        starved = await asked
        await coalescer.close()
        return behind, after, starved

    behind, after, starved = asyncio.run(main())
    assert 7.0 <= behind < 9.0
    assert after == 0.0
    assert starved >= 0.3
