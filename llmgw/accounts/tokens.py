"""API tokens: make one (the secret returned once), and check one.

A token is `llmgw-tk-` and 43 URL-safe characters (256 random bits); tokens
made by DRF's authtoken before this (40 hex characters) were converted to
digests in place and keep working until they expire. The secret leaves this
module once, in the return value of `create_token`, and is never logged.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from llmgw.accounts import token_cache
from llmgw.accounts.hashing import digest
from llmgw.accounts.models import ApiToken

TOKEN_PREFIX = "llmgw-tk-"
DISPLAY_CHARS = 14


class TokenRefused(Exception):
    """Why a token does not authenticate, in words for its holder."""


@dataclass(frozen=True)
class CreatedToken:
    token: ApiToken
    secret: str


def create_token(user: User, name: str, days: int | None = None) -> CreatedToken:
    days = settings.API_TOKEN_TTL_DAYS if days is None else days
    if days < 1:
        raise ValueError("a token lives at least a day")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name[:100] or "api",
            prefix=secret[:DISPLAY_CHARS],
            digest=digest(secret),
            expires_at=timezone.now() + timedelta(days=days),
        )
    return CreatedToken(token, secret)


def authenticate(secret: str) -> ApiToken:
    """The token whose secret this is, with its user; TokenRefused otherwise.

    From this web process's copy when it has one (llmgw.accounts.token_cache:
    no query at all, its user's roles included), else one query, looked up
    by digest: an index lookup on the digest tells a guesser nothing about
    the secret, so no constant-time compare is needed.
    """
    key = digest(secret)
    kept = token_cache.CACHE.get(key)
    if kept is not None:
        token = token_cache.token(kept)
        _check(token)
        return token
    generation = token_cache.CACHE.generation()
    try:
        found: ApiToken | None = ApiToken.objects.select_related("user").filter(digest=key).first()
    except Exception:
        token_cache.CACHE.clear()  # a failed read: the copy is not trusted either
        raise
    if found is None:
        raise TokenRefused("invalid token")
    _check(found)
    if generation is not None:
        try:
            token_cache.CACHE.put(key, token_cache.entry(found), generation)
        except Exception:
            token_cache.CACHE.clear()
            raise
    return found


def _check(token: ApiToken) -> None:
    # Expiry is checked on every request, the copy's too: it needs no news.
    if token.expires_at <= timezone.now():
        raise TokenRefused(
            f"token expired at {token.expires_at:%Y-%m-%d %H:%M} UTC; make a new one"
        )
    # Checked here, on every request: disabling a user cuts their tokens at
    # once (the copy is dropped by the change's notice, token_events).
    if not token.user.is_active:
        raise TokenRefused("user inactive or deleted")
