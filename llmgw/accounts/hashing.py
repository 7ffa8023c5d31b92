"""The one digest of a secret the control plane stores: node credentials,
join tokens, API tokens and gateway keys are kept only as this.

SHA-256 rather than a slow password hash: each secret is 32 random bytes
from `secrets`, so nothing is gained by slowing a guess down, and a fast
digest is what lets a request find its row by an indexed lookup."""

from __future__ import annotations

import hashlib


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
