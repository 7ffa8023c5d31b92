"""Each web process's copy of the API tokens it lately let in, with their
users and roles: a request whose token is in it asks the database nothing
to know who it is and what it may do.

At 5,000 nodes the token's row, its user and the user's groups were two
queries of every REST request, and much of its web CPU. A copy is only as
good as the news of its rows changing, so the copy is trusted only while
llmgw.accounts.token_events hears that news: triggers on the token, user
and group tables NOTIFY on every commit that changes them (whoever writes:
the admin, a queryset's update() that sends no signal, raw SQL), and each
notice drops the whole copy. While the listener is away (starting, its
connection lost, or silent longer than STALE_S) every request reads the
database as if there were no copy at all.

Only digests are keys; the secret itself is never kept. An entry holds the
rows as the database answered them (not model instances: each request gets
objects of its own, which it may change without changing anyone else's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from llmgw.accounts import roles
from llmgw.accounts.models import ApiToken

# Entries at most; a full copy is dropped whole (a token then costs one
# more read) rather than kept in order of use on every request.
MAX_ENTRIES = 10_000
# An entry is read again after this long, news or not: belt and braces
# for a notice that never came (the notice is what makes it prompt).
MAX_AGE_S = 60.0
# The listener proves its connection alive by a round trip at least every
# token_events.PING_S; the copy is trusted only while its last proof is
# this recent, so a connection gone silent stops it within seconds.
STALE_S = 3.0


@dataclass(frozen=True)
class Entry:
    token: tuple[Any, ...]  # ApiToken's column values, in its fields' order
    user: tuple[Any, ...]  # the same of its user
    roles: frozenset[str]


def _columns(model: Any) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


def entry(token: ApiToken) -> Entry:
    """What to keep of a token read with its user and the user's roles."""
    return Entry(
        token=tuple(getattr(token, name) for name in _columns(ApiToken)),
        user=tuple(getattr(token.user, name) for name in _columns(User)),
        roles=roles.groups(token.user),
    )


def token(kept: Entry) -> ApiToken:
    """The token and its user as the database answered them when kept,
    fresh objects of this request's own; the roles read with them."""
    found: ApiToken = ApiToken.from_db("default", _columns(ApiToken), kept.token)
    user = User.from_db("default", _columns(User), kept.user)
    roles.remember(user, kept.roles)
    found.user = user
    return found


class TokenCache:
    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        max_age_s: float = MAX_AGE_S,
        stale_s: float = STALE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries, self._max_age_s, self._stale_s = max_entries, max_age_s, stale_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, Entry]] = {}
        # Bumped by every clear: a read that began before a clear (its rows
        # perhaps older than the change that cleared) is not kept after it.
        self._generation = 0
        # When the listener last proved that every change committed before
        # then has cleared the copy; None while it is not listening.
        self._heard_at: float | None = None

    def _live(self, now: float) -> bool:
        heard = self._heard_at
        return heard is not None and now - heard <= self._stale_s

    def get(self, digest: str) -> Entry | None:
        now = self._clock()
        if not self._live(now):
            return None
        kept = self._entries.get(digest)
        if kept is None or now - kept[0] > self._max_age_s:
            return None
        return kept[1]

    def generation(self) -> int | None:
        """To pass to `put` with what a read then finds; None: keep nothing
        (the listener is away)."""
        with self._lock:
            return self._generation if self._live(self._clock()) else None

    def put(self, digest: str, kept: Entry, generation: int) -> bool:
        """Keep `kept`, read after `generation()` answered `generation`,
        unless the copy was cleared since: True if kept."""
        with self._lock:
            if generation != self._generation or not self._live(self._clock()):
                return False
            if len(self._entries) >= self._max_entries:
                self._entries = {}
            self._entries[digest] = (self._clock(), kept)
            return True

    def clear(self) -> None:
        with self._lock:
            self._entries = {}
            self._generation += 1

    def heard(self, asked_at: float) -> None:
        """The listener is listening, and every change committed before
        `asked_at` (its clock) has cleared the copy."""
        with self._lock:
            if self._heard_at is None:
                # Back after being away: a change may have committed
                # meanwhile with nobody to hear it.
                self._entries = {}
                self._generation += 1
            self._heard_at = max(asked_at, self._heard_at or asked_at)

    def lost(self) -> None:
        """The listener is away: drop the copy and read the database."""
        with self._lock:
            self._entries = {}
            self._generation += 1
            self._heard_at = None

    def __len__(self) -> int:
        return len(self._entries)


# The process's copy; never live unless the ASGI lifespan started its
# listener, so manage.py, workers and tests' clients always read the database.
CACHE = TokenCache()
