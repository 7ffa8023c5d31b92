"""Password guessing, slowed: at most LOGIN_FAILURES_PER_MINUTE wrong
passwords a minute for one username from one address, and five times that
from one address over every username (one guess each at many accounts).
Past either, the token endpoint and both login pages answer 429 with
Retry-After until the minute is out, the right password included: a
throttle that let the right one through would tell a guesser when it hit.

Counters live in the cache: Redis in production, shared by every web
process; per process in the embedded default. A counter's minute starts at
its first failure and it is one atomic INCR. Only failures count, through
Django's user_login_failed signal, which every password check sends (the
console's login, Django admin's, the token endpoint). The address is the
client's (client_address): behind a reverse proxy REMOTE_ADDR is the
proxy's, and counting by it let fifty wrong passwords from anyone lock out
everyone behind it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from llmgw.shared_cache import shared

WINDOW_S = 60
# One address guessing at many usernames, against one username's limit.
ADDRESS_FACTOR = 5


def client_address(request: HttpRequest) -> str:
    """REMOTE_ADDR, unless it is one of settings.TRUSTED_PROXIES: then
    X-Forwarded-For is read from the right, past each hop a trusted proxy
    added, to the first address that is not a trusted proxy's: the client
    as the nearest proxy saw it. Whatever stands left of that the client
    wrote itself, and believing it would give a guesser a fresh address for
    every try; a malformed hop ends the walk at the last proxy believed."""
    address = request.META.get("REMOTE_ADDR", "") or "-"
    proxies = settings.TRUSTED_PROXIES
    if not _trusted(address, proxies):
        return address
    for hop in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        try:
            address = str(ipaddress.ip_address(hop.strip()))
        except ValueError:
            return address
        if not _trusted(address, proxies):
            return address
    return address


def _trusted(address: str, proxies: tuple[Any, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def _counters(request: HttpRequest, username: str) -> list[tuple[str, int]]:
    address = client_address(request)
    # Hashed: a username is whatever a client sent, of any length or alphabet.
    pair = hashlib.sha256(f"{address}\0{username.casefold()}".encode()).hexdigest()[:32]
    limit = settings.LOGIN_FAILURES_PER_MINUTE
    return [
        (f"llmgw:login-failures:{pair}", limit),
        (f"llmgw:login-failures:{address}", limit * ADDRESS_FACTOR),
    ]


def retry_after(request: HttpRequest, username: str) -> int | None:
    """Seconds until `username` may try again from this address; None: now."""
    counters = _counters(request, username)
    cache = shared()
    found = cache.get_many([k for key, _ in counters for k in (key, key + ":since")])
    now = time.time()
    waits = [
        WINDOW_S - (now - found.get(key + ":since", now))
        for key, limit in counters
        if found.get(key, 0) >= limit
    ]
    return max(1, min(WINDOW_S, math.ceil(max(waits)))) if waits else None


def failed(request: HttpRequest, username: str) -> None:
    cache = shared()
    for key, _ in _counters(request, username):
        # add() is atomic: only the failure that starts the minute dates it.
        if cache.add(key, 0, timeout=WINDOW_S):
            cache.set(key + ":since", time.time(), timeout=WINDOW_S)
        try:
            cache.incr(key)  # INCR is atomic: two processes never lose a count
        except ValueError:  # the minute ran out between the two
            cache.set(key, 1, timeout=WINDOW_S)
            cache.set(key + ":since", time.time(), timeout=WINDOW_S)


def on_login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **_: Any
) -> None:
    """user_login_failed's receiver. A check with no request (a management
    command, the test client's login()) is no one guessing over the network."""
    if request is None:
        return
    failed(getattr(request, "_request", request), str(credentials.get("username", "")))
