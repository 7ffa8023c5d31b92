"""Gateway API keys: create, revoke, and the digest the gateway looks up.

A key is `sk-llmgw-` and 43 URL-safe characters (256 random bits). Only its
SHA-256 is stored: a fast hash is enough for a secret with that much
entropy (no dictionary to guess from), and it lets the gateway check a key
with one dictionary lookup and no SQL. The key itself leaves this module
once, in the return value of `create_key`, and is never logged.

A key may carry limits (requests and tokens per minute, requests at once):
`None` is no limit, otherwise a whole number from 1 to MAX_LIMIT. The
gateway enforces them (llmgw.serving.gateway.limits) from its next key
table load, within a second.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from llmgw.accounts.hashing import digest
from llmgw.catalog.models import Model
from llmgw.serving.models import LIMIT_FIELDS, ApiKey

KEY_PREFIX = "sk-llmgw-"
DISPLAY_CHARS = 14
# The column's range (PostgreSQL integer); far above any real limit.
MAX_LIMIT = 2_147_483_647


class ApiKeyError(Exception):
    """A refusal, in words for the operator."""


@dataclass(frozen=True)
class CreatedKey:
    api_key: ApiKey
    key: str


def check_limits(limits: dict[str, int | None]) -> dict[str, int | None]:
    """The limits as given, or ApiKeyError naming the first field that is wrong."""
    for field, value in limits.items():
        if field not in LIMIT_FIELDS:
            raise ApiKeyError(f"{field}: not a key limit (one of {', '.join(LIMIT_FIELDS)})")
        if value is None:
            continue
        # bool is an int to Python; True is not a limit of 1.
        if not isinstance(value, int) or isinstance(value, bool):
            raise ApiKeyError(f"{field}: a whole number, or null for no limit")
        if not 1 <= value <= MAX_LIMIT:
            raise ApiKeyError(f"{field}: from 1 to {MAX_LIMIT}, or null for no limit")
    return limits


def create_key(
    name: str,
    owner: User | None,
    models: Iterable[str] = (),
    all_models: bool = False,
    limits: dict[str, int | None] | None = None,
) -> CreatedKey:
    names = sorted(set(models))
    limits = check_limits(limits or {})
    if not name.strip():
        raise ApiKeyError("a key needs a name")
    if not names and not all_models:
        raise ApiKeyError("name the models the key may use, or allow all models")
    if names and all_models:
        raise ApiKeyError("either name models or allow all models, not both")
    with transaction.atomic():
        found = list(Model.objects.filter(name__in=names))
        missing = sorted(set(names) - {m.name for m in found})
        if missing:
            raise ApiKeyError(f"no such model: {', '.join(missing)}")
        if ApiKey.objects.filter(name=name, revoked_at__isnull=True).exists():
            raise ApiKeyError(f"an active key is already named {name!r}")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        api_key = ApiKey.objects.create(
            name=name,
            prefix=key[:DISPLAY_CHARS],
            digest=digest(key),
            owner=owner,
            all_models=all_models,
            **limits,
        )
        api_key.allowed_models.set(found)
    return CreatedKey(api_key, key)


def set_limits(api_key: ApiKey, limits: dict[str, int | None]) -> ApiKey:
    """Change the limits named in `limits` (None lifts one); the others stay."""
    check_limits(limits)
    if api_key.revoked_at is not None:
        raise ApiKeyError("the key is revoked; its limits no longer matter")
    for field, value in limits.items():
        setattr(api_key, field, value)
    if limits:
        api_key.save(update_fields=list(limits))
    return api_key


def revoke_key(api_key: ApiKey) -> ApiKey:
    """Idempotent: revoking a revoked key keeps its first revocation time."""
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db(fields=["revoked_at"])
    return api_key
