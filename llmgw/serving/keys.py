"""Gateway API keys: create, revoke, and the digest the gateway looks up.

A key is `sk-llmgw-` and 43 URL-safe characters (256 random bits). Only its
SHA-256 is stored: a fast hash is enough for a secret with that much
entropy (no dictionary to guess from), and it lets the gateway check a key
with one dictionary lookup and no SQL. The key itself leaves this module
once, in the return value of `create_key`, and is never logged.
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
from llmgw.serving.models import ApiKey

KEY_PREFIX = "sk-llmgw-"
DISPLAY_CHARS = 14


class ApiKeyError(Exception):
    """A refusal, in words for the operator."""


@dataclass(frozen=True)
class CreatedKey:
    api_key: ApiKey
    key: str


def create_key(
    name: str, owner: User | None, models: Iterable[str] = (), all_models: bool = False
) -> CreatedKey:
    names = sorted(set(models))
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
        )
        api_key.allowed_models.set(found)
    return CreatedKey(api_key, key)


def revoke_key(api_key: ApiKey) -> ApiKey:
    """Idempotent: revoking a revoked key keeps its first revocation time."""
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db(fields=["revoked_at"])
    return api_key
