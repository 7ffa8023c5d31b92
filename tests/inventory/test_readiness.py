"""A node is NotReady only when the control plane could have heard it and
did not (llmgw.inventory.readiness): one rule, read alike by the API, the
console, the metrics, placement's views and the staleness pass."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from llmgw.inventory import heartbeats, listening, readiness, services
from llmgw.inventory.models import Hearing as HearingRow
from llmgw.inventory.models import Node
from llmgw.placement.snapshot import node_views
from tests.payloads import heartbeat, registration

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.get_fixed_timezone(0))
GRACE = timedelta(seconds=30)  # three beats of 10 s


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ready(at: float, now: float, hearing: readiness.Hearing) -> bool:
    return readiness.is_ready("Ready", s(at), 10, s(now), hearing)


def test_silence_counts_only_while_the_control_plane_could_hear() -> None:
    unrecorded = readiness.UNRECORDED
    assert ready(0, 30, unrecorded) and not ready(0, 31, unrecorded)
    # Heard from 0 to 8, then nothing (its database or its web processes
    # down): the silence stops counting GAP_S after the last write.
    paused = readiness.Hearing(since=s(-100), heard_at=s(8))
    assert ready(0, 300, paused), "a node went NotReady while no one could hear it"
    # ...though a node already silent a full grace while heard is not.
    assert not ready(-30, 300, paused)

    # Hearing again from 70: every node has a full grace from then.
    def back(now: float) -> readiness.Hearing:
        return readiness.Hearing(since=s(70), heard_at=s(now))

    assert ready(0, 72, back(72)) and ready(0, 100, back(100)) and not ready(0, 101, back(101))
    assert readiness.deadline("Ready", s(0), 10, s(72), back(72)) == s(100)
    # Not Ready on record (marked, or never heard) is never Ready.
    assert not readiness.is_ready("NotReady", s(0), 10, s(72), back(72))
    assert not readiness.is_ready("Ready", None, 10, s(72), back(72))


def test_a_deadline_while_no_one_hears_is_a_look_soon_not_a_lapse() -> None:
    paused = readiness.Hearing(since=s(-100), heard_at=s(8))
    assert readiness.deadline("Ready", s(0), 10, s(10), paused) == s(30)
    later = readiness.deadline("Ready", s(0), 10, s(300), paused)
    assert later == s(300 + readiness.TICK_S)


@pytest.mark.django_db
def test_the_sql_rule_agrees_with_the_python_one(make_node: Any) -> None:
    ages = [0, 10, 29, 31, 60, 200]
    for age in ages:
        node, _ = make_node(f"n{age}")
        node.state, node.last_heartbeat_at = "Ready", s(-age)
        node.save(update_fields=["state", "last_heartbeat_at"])
    for hearing in (
        readiness.UNRECORDED,
        readiness.Hearing(since=s(-1000), heard_at=s(0)),
        readiness.Hearing(since=s(-1000), heard_at=s(-50)),
        readiness.Hearing(since=s(-10), heard_at=s(0)),
        readiness.Hearing(since=s(-40), heard_at=s(0)),
    ):
        by_sql = set(Node.objects.filter(readiness.ready_q(s(0), hearing)).values_list("name"))
        by_python = {
            (n.name,)
            for n in Node.objects.all()
            if readiness.is_ready(n.state, n.last_heartbeat_at, 10, s(0), hearing)
        }
        assert by_sql == by_python, hearing


def _heard(start: datetime, end: datetime) -> None:
    """The web processes' writes, every tick from start to end."""
    at = start
    while at <= end:
        readiness.heard(at)
        at += timedelta(seconds=readiness.TICK_S)


def _fleet(make_node: Any, agent_client: Any, names: tuple[str, ...], at: datetime) -> None:
    for name in names:
        _, credential = make_node(name)
        agent_client(credential).post("register", registration(name))
        heartbeats.heartbeat(Node.objects.get(name=name), heartbeat(name), now=at)


@pytest.mark.django_db
@pytest.mark.parametrize("outage", ["database", "web processes"])
def test_the_staleness_pass_marks_no_node_for_the_control_planes_outage(
    make_node: Any, agent_client: Any, outage: str
) -> None:
    _fleet(make_node, agent_client, ("back-soon", "gone"), s(0))
    _heard(s(0), s(8))
    # A minute with nothing heard. The database down, the staleness pass
    # cannot run either; the web processes down, it runs every 5 s.
    passes = range(10, 70, 5) if outage == "web processes" else []
    for p in passes:
        assert services.mark_missed_heartbeats(s(p)) == [], f"marked at {p} s"
    _heard(s(70), s(70))
    assert services.mark_missed_heartbeats(s(70)) == [], "marked for the outage"
    heartbeats.heartbeat(Node.objects.get(name="back-soon"), heartbeat("back-soon"), now=s(82))
    _heard(s(72), s(101))
    for p in range(75, 100, 5):
        assert services.mark_missed_heartbeats(s(p)) == [], f"marked at {p} s"
    # A node still silent a full grace after hearing resumed is NotReady.
    assert services.mark_missed_heartbeats(s(101)) == ["gone"]
    assert Node.objects.get(name="back-soon").state == "Ready"


@pytest.mark.django_db
def test_every_surface_reads_the_fleet_ready_after_an_outage(
    make_node: Any, agent_client: Any, api: Any, client: Any, operator: Any
) -> None:
    """The API's list, filter and summary, the console, the metrics and
    placement's views, in the seconds after a 60 s outage: the fleet was
    last heard before it, so by wall time every node is past its grace."""
    now = timezone.now()
    names = ("a", "b")
    _fleet(make_node, agent_client, names, now - timedelta(seconds=70))
    HearingRow.objects.all().delete()
    _heard(now - timedelta(seconds=70), now - timedelta(seconds=62))
    _heard(now - timedelta(seconds=1), now - timedelta(seconds=1))

    listed = api.get("/api/v1/nodes/").json()["results"]
    assert {n["name"]: n["state"] for n in listed} == dict.fromkeys(names, "Ready")
    assert api.get("/api/v1/nodes/?state=NotReady").json()["count"] == 0
    assert api.get("/api/v1/nodes/?state=Ready").json()["count"] == 2
    summary = api.get("/api/v1/nodes/summary/").json()
    assert (summary["ready"], summary["not_ready"]) == (2, 0), summary
    client.force_login(operator)
    for name in names:
        assert client.get(f"/console/api/nodes/{name}").json()["state"] == "Ready"
    scraped = api.get("/metrics/nodes").content.decode()
    up = [line for line in scraped.splitlines() if line.startswith("llmgw_node_up{")]
    assert len(up) == 2 and all(line.endswith(" 1.0") for line in up), up
    assert {v.name: v.state for v in node_views()} == dict.fromkeys(names, "Ready")
    assert services.mark_missed_heartbeats() == []


@pytest.mark.django_db(transaction=True)
def test_a_web_process_records_that_it_hears_from_its_lifespan() -> None:
    sent: list[str] = []
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            sent.append(message["type"])
            if message["type"] == "lifespan.shutdown":
                return

    async def run() -> None:
        app = listening.lifespan(inner)
        task = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, None))
        await inbox.put({"type": "lifespan.startup"})
        began, started = timezone.now(), time.monotonic()
        # The thread's write, seen without a query from this event loop.
        while time.monotonic() - started < 10:
            heard_at = readiness.last_known().heard_at
            if heard_at is not None and heard_at >= began:
                break
            await asyncio.sleep(0.1)
        await inbox.put({"type": "lifespan.shutdown"})
        await task

    asyncio.run(run())
    row = HearingRow.objects.get()
    assert timezone.now() - row.heard_at < timedelta(seconds=10)
    assert sent == ["lifespan.startup", "lifespan.shutdown"]
    for thread in threading.enumerate():
        if thread.name == "hearing":
            thread.join(readiness.TICK_S + 5)


@pytest.mark.django_db
def test_no_node_is_marked_while_a_web_process_is_behind_with_its_heartbeats(
    make_node: Any, agent_client: Any
) -> None:
    """A returning fleet queued past the agents' timeout is not silence of
    the nodes': while a web process says it is BEHIND_S or more behind,
    every node's grace starts again, and it has a full one once they are
    answered in time."""
    _fleet(make_node, agent_client, ("queued", "gone"), s(0))
    _heard(s(0), s(20))
    at = s(22)
    while at <= s(80):  # a minute behind, still writing every tick
        readiness.heard(at, behind_s=readiness.BEHIND_S + 1)
        at += timedelta(seconds=readiness.TICK_S)
    for p in range(25, 80, 5):
        assert services.mark_missed_heartbeats(s(p)) == [], f"marked at {p} s"
    heartbeats.heartbeat(Node.objects.get(name="queued"), heartbeat("queued"), now=s(85))
    _heard(s(82), s(112))
    for p in range(85, 110, 5):
        assert services.mark_missed_heartbeats(s(p)) == [], f"marked at {p} s"
    # Answered in time again since 80 s: a full grace later, the silent one.
    assert services.mark_missed_heartbeats(s(112)) == ["gone"]
    assert Node.objects.get(name="queued").state == "Ready"


@pytest.mark.django_db
def test_nodes_marked_not_ready_ask_the_reconciler_at_once(
    make_node: Any,
    agent_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Their replicas are lost: placed again on the reconciler's run asked
    for now, not its next tick."""
    asked: list[int] = []
    monkeypatch.setattr("llmgw.serving.tasks.reconcile_soon", lambda: asked.append(1))
    _fleet(make_node, agent_client, ("gone",), s(0))
    _heard(s(0), s(40))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.mark_missed_heartbeats(s(40)) == ["gone"]
    assert asked == [1]
    with django_capture_on_commit_callbacks(execute=True):
        assert services.mark_missed_heartbeats(s(45)) == []
    assert asked == [1], "a pass that marks nobody asks for nothing"


@pytest.mark.django_db
def test_a_web_process_that_starts_gives_every_node_a_full_grace(
    make_node: Any, agent_client: Any
) -> None:
    """Killed and started again within GAP_S, the processes leave no gap;
    their start still gives every node a full grace."""
    _fleet(make_node, agent_client, ("returning", "gone"), s(0))
    _heard(s(0), s(24))
    readiness.heard(s(26), started=True)  # down 2 s, no gap in the record
    _heard(s(28), s(56))
    for p in range(30, 56, 5):
        assert services.mark_missed_heartbeats(s(p)) == [], f"marked at {p} s"
    heartbeats.heartbeat(Node.objects.get(name="returning"), heartbeat("returning"), now=s(50))
    assert services.mark_missed_heartbeats(s(57)) == ["gone"]


def _ticks(ear: listening.Ear, start: float, end: float) -> None:
    at = start
    while at <= end:
        ear.tick(s(at), 0.0)
        at += readiness.TICK_S


def _beat(names: tuple[str, ...] | list[str], at: float) -> None:
    for name in names:
        heartbeats.heartbeat(Node.objects.get(name=name), heartbeat(name), now=s(at))


def _return(
    ear: listening.Ear, names: tuple[str, ...], every_s: float, until: float, end: float
) -> tuple[float, list[str]]:
    """A web process started at 26 s. From 28 s, one more node comes back
    every `every_s` until `until` (those back beat every tick), ticking
    until `end` or the first node marked: that tick's time, and who."""
    _ticks(ear, 26, 26)
    coming, back = iter(names), []
    t, due = 28.0, 28.0 + every_s
    while t <= end:
        ear.tick(s(t), 0.0)
        if t >= due and t <= until and (name := next(coming, None)) is not None:
            back.append(name)
            due += every_s
        _beat(back, t)
        marked = services.mark_missed_heartbeats(s(t))
        if marked:
            return t, sorted(marked)
        t += readiness.TICK_S
    return t, []


@pytest.mark.django_db
def test_a_returning_fleet_has_its_grace_until_it_is_back(
    make_node: Any, agent_client: Any
) -> None:
    """Every process restarted: the agents come back as they retry, and
    the last can take longer than a grace. While they keep coming, until
    RETURNED of the fleet is heard again, no node is marked; then the one
    that really died is, a grace later."""
    names = tuple(f"n{i}" for i in range(10))
    _fleet(make_node, agent_client, names, s(0))
    _heard(s(0), s(24))
    ear = listening.Ear()
    # Nine back, one every 4 s: the ninth at 64 s, 38 s after the start.
    t, marked = _return(ear, names[:9], 4, 64, 68)
    assert (t, marked) == (70, []), "marked while the fleet was coming back"
    assert ear.returning is None, "the fleet is back"
    names_back = list(names[:9])
    while not marked:
        ear.tick(s(t), 0.0)
        _beat(names_back, t)
        marked = services.mark_missed_heartbeats(s(t))
        t += readiness.TICK_S
    assert marked == ["n9"]
    assert 66 + GRACE.total_seconds() <= t - readiness.TICK_S <= 66 + GRACE.total_seconds() + 6


@pytest.mark.django_db
def test_a_return_is_over_once_no_node_comes_back(make_node: Any, agent_client: Any) -> None:
    """Four of ten lost power with the restart: the six come back at once,
    and once no other has for QUIET_S, the four are marked a grace later,
    not after RETURN_GRACES graces."""
    names = tuple(f"n{i}" for i in range(10))
    _fleet(make_node, agent_client, names, s(0))
    _heard(s(0), s(24))
    ear = listening.Ear()
    t, marked = _return(ear, names[:6], 2, 40, 200)
    assert marked == ["n6", "n7", "n8", "n9"]
    # The sixth back at 40 s; quiet from then on.
    last_stretch = 40 + readiness.QUIET_S
    assert last_stretch + GRACE.total_seconds() <= t <= last_stretch + GRACE.total_seconds() + 6


@pytest.mark.django_db
def test_a_slow_start_is_not_a_quiet_return(make_node: Any, agent_client: Any) -> None:
    """Restarted processes can take a while to answer anyone: until a first
    node is heard again, no quiet ends the return. Here none is until 70 s,
    44 s after the start, and then every one comes back unmarked."""
    names = tuple(f"n{i}" for i in range(10))
    _fleet(make_node, agent_client, names, s(0))
    _heard(s(0), s(24))
    ear = listening.Ear()
    _ticks(ear, 26, 26)
    for t in range(28, 70, 2):
        ear.tick(s(t), 0.0)
        assert services.mark_missed_heartbeats(s(t)) == [], f"marked at {t} s"
    for t in range(70, 112, 2):
        ear.tick(s(t), 0.0)
        _beat(names, t)
        assert services.mark_missed_heartbeats(s(t)) == [], f"marked at {t} s"
    assert ear.returning is None, "the fleet is back"


@pytest.mark.django_db
def test_a_return_ends_after_its_bound_however_few_came_back(
    make_node: Any, agent_client: Any
) -> None:
    """Nodes keep coming back, too slowly ever to make RETURNED of the
    fleet: the return lasts RETURN_GRACES graces, then the rest are marked
    a grace later."""
    names = tuple(f"n{i}" for i in range(20))
    _fleet(make_node, agent_client, names, s(0))
    _heard(s(0), s(24))
    ear = listening.Ear()
    bound = 26 + readiness.RETURN_GRACES * GRACE.total_seconds()  # 116 s
    # One every 8 s, inside QUIET_S: eleven back by the bound.
    t, marked = _return(ear, names, 8, bound, 300)
    assert ear.returning is None
    assert marked == sorted(names[11:])
    # A grace after the return's last stretch, which began at its bound.
    assert bound + GRACE.total_seconds() <= t <= bound + GRACE.total_seconds() + 6
