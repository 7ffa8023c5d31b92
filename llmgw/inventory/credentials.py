"""Node join tokens and credentials.

Only SHA-256 digests are stored: a database dump must not let anyone
report as a node. The secrets are 256-bit random, so a plain digest (no
salt, no stretching) is enough and lets a request be checked in one
indexed lookup.
"""

from __future__ import annotations

import hmac
import secrets

from llmgw.accounts.hashing import digest


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def make_credential(node_name: str) -> tuple[str, str]:
    """Return (credential, digest). The credential names its node so the
    server can find the row before comparing; node names may hold dots, the
    secret never does."""
    secret = new_secret()
    return f"{node_name}.{secret}", digest(secret)


def split_credential(credential: str) -> tuple[str, str] | None:
    name, sep, secret = credential.strip().rpartition(".")
    if not sep or not name or not secret:
        return None
    return name, secret


def matches(secret: str, stored_digest: str) -> bool:
    return bool(stored_digest) and hmac.compare_digest(digest(secret), stored_digest)
