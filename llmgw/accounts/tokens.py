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

    One query, looked up by digest: an index lookup on the digest tells a
    guesser nothing about the secret, so no constant-time compare is needed.
    """
    token: ApiToken | None = (
        ApiToken.objects.select_related("user").filter(digest=digest(secret)).first()
    )
    if token is None:
        raise TokenRefused("invalid token")
    if token.expires_at <= timezone.now():
        raise TokenRefused(
            f"token expired at {token.expires_at:%Y-%m-%d %H:%M} UTC; make a new one"
        )
    # Checked here, on every request: disabling a user cuts their tokens at once.
    if not token.user.is_active:
        raise TokenRefused("user inactive or deleted")
    return token
