"""A web process's copy of the API tokens it let in (llmgw.accounts.token_cache):
bounded, aged, trusted only while its listener is heard, dropped on a
failed read, and never holding a secret. The listener itself, and the
revocations it hears, are proved through a real server in
test_token_revocation.py."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from llmgw.accounts import roles, token_cache, tokens
from tests.tokens import make_token


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> token_cache.TokenCache:
    """The process's copy, as if its listener had just been heard."""
    live = token_cache.TokenCache(max_entries=3, max_age_s=60, stale_s=3, clock=clock)
    monkeypatch.setattr(token_cache, "CACHE", live)
    live.heard(clock.now)
    return live


def test_without_a_listener_every_request_reads_the_database(operator, django_assert_num_queries):
    secret = make_token(operator)
    for _ in range(2):
        with django_assert_num_queries(2):  # the token with its user, then its roles
            assert roles.is_operator(tokens.authenticate(secret).user)
    assert len(token_cache.CACHE) == 0


def test_a_kept_token_asks_nothing_for_its_user_or_its_roles(
    operator, cache, django_assert_num_queries
):
    secret = make_token(operator)
    with django_assert_num_queries(2):
        first = tokens.authenticate(secret)
    with django_assert_num_queries(0):
        again = tokens.authenticate(secret)
        assert roles.is_operator(again.user) and not roles.is_admin(again.user)
    assert (again.pk, again.user.pk, again.user.username) == (first.pk, operator.pk, "ops")
    # Objects of the request's own: changing one changes no other request's.
    again.user.first_name = "changed"
    assert tokens.authenticate(secret).user.first_name == ""
    assert secret not in repr(cache._entries)


def test_a_kept_token_past_its_expiry_is_refused_without_asking(
    operator, cache, monkeypatch, django_assert_num_queries
):
    secret = make_token(operator, days=1)
    tokens.authenticate(secret)
    later = timezone.now() + timedelta(days=1, seconds=1)
    monkeypatch.setattr(tokens.timezone, "now", lambda: later)
    with django_assert_num_queries(0), pytest.raises(tokens.TokenRefused, match="expired"):
        tokens.authenticate(secret)


def test_a_refused_token_is_not_kept(operator, cache):
    operator.is_active = False
    operator.save()
    secret = make_token(operator)
    with pytest.raises(tokens.TokenRefused, match="inactive"):
        tokens.authenticate(secret)
    with pytest.raises(tokens.TokenRefused, match="invalid"):
        tokens.authenticate(secret + "x")
    assert len(cache) == 0


def test_a_failed_read_drops_the_whole_copy(operator, cache):
    kept, other = make_token(operator), make_token(operator)
    tokens.authenticate(kept)
    assert len(cache) == 1

    def fail(*args: Any) -> Any:
        raise OperationalError("the database is away")

    with connection.execute_wrapper(fail), pytest.raises(OperationalError):
        tokens.authenticate(other)
    assert len(cache) == 0


def test_the_copy_is_bounded_and_dropped_whole_when_full(cache):
    generation = cache.generation()
    assert generation is not None
    for n in range(3):
        assert cache.put(f"d{n}", token_cache.Entry((), (), frozenset()), generation)
    assert len(cache) == 3
    assert cache.put("d3", token_cache.Entry((), (), frozenset()), generation)
    assert len(cache) == 1 and cache.get("d3") is not None and cache.get("d0") is None


def test_an_entry_is_read_again_after_its_maximum_age(cache, clock):
    cache.put("d", token_cache.Entry((), (), frozenset()), cache.generation() or 0)
    clock.now += 2
    cache.heard(clock.now)
    assert cache.get("d") is not None
    clock.now += 59
    cache.heard(clock.now)
    assert cache.get("d") is None


def test_a_listener_silent_too_long_is_not_trusted_until_heard_again(cache, clock):
    cache.put("d", token_cache.Entry((), (), frozenset()), cache.generation() or 0)
    clock.now += 3.5
    assert cache.get("d") is None and cache.generation() is None
    cache.heard(clock.now)  # it was only slow: every change before now has been heard
    assert cache.get("d") is not None


def test_a_read_begun_before_a_change_is_not_kept_after_it(cache):
    """A request read the rows, a revocation committed and its notice
    cleared the copy, then the request went to keep what it read."""
    generation = cache.generation()
    assert generation is not None
    cache.clear()
    assert not cache.put("d", token_cache.Entry((), (), frozenset()), generation)
    assert cache.get("d") is None


def test_a_lost_listener_drops_the_copy_and_keeps_nothing_until_heard_again(cache, clock):
    generation = cache.generation() or 0
    cache.put("d", token_cache.Entry((), (), frozenset()), generation)
    cache.lost()
    assert cache.get("d") is None and cache.generation() is None
    assert not cache.put("d", token_cache.Entry((), (), frozenset()), generation)
    cache.heard(clock.now)
    assert cache.generation() is not None and len(cache) == 0


class Lifespan:
    """`app`'s ASGI lifespan, run on an event loop of its own thread, as a
    server runs it; the database is used from the test's own thread."""

    def __init__(self, app: Any) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[str] = []

        async def send(message: dict[str, Any]) -> None:
            self.sent.append(message["type"])

        run = app({"type": "lifespan"}, self.messages.get, send)
        self.done = asyncio.run_coroutine_threadsafe(run, self.loop)

    def say(self, kind: str) -> None:
        asyncio.run_coroutine_threadsafe(self.messages.put({"type": kind}), self.loop).result()

    def stop(self) -> None:
        self.say("lifespan.shutdown")
        self.done.result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)


async def completes(scope: Any, receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        await send({"type": f"{message['type']}.complete"})
        if message["type"] == "lifespan.shutdown":
            return


def test_the_lifespan_keeps_tokens_while_listening_and_nothing_after_shutdown(
    transactional_db, operator, django_assert_num_queries
):
    from llmgw.accounts import token_events
    from llmgw.accounts.models import ApiToken

    # Made before it listens: a notice of its own making would drop it.
    secret = make_token(operator)
    lifespan = Lifespan(token_events.lifespan(completes))
    try:
        lifespan.say("lifespan.startup")
        deadline = time.monotonic() + 10
        while token_cache.CACHE.generation() is None:
            assert time.monotonic() < deadline, "never listening"
            time.sleep(0.02)
        tokens.authenticate(secret)
        with django_assert_num_queries(0):
            tokens.authenticate(secret)
        cut = time.monotonic()
        ApiToken.objects.filter(user=operator).delete()
        while True:
            try:
                tokens.authenticate(secret)
            except tokens.TokenRefused:
                break
            assert time.monotonic() - cut < 1.0, "still let in 1 s after its deletion"
            time.sleep(0.01)
    finally:
        lifespan.stop()
    assert lifespan.sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    # Shut down: the listener has ended and the copy is no longer trusted.
    assert token_cache.CACHE.generation() is None and len(token_cache.CACHE) == 0
