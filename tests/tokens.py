"""API tokens for tests, made the way the token endpoint makes them."""

from __future__ import annotations

from typing import Any


def make_token(user: Any, days: int | None = None) -> str:
    """A new API token's secret for `user` (`Authorization: Token <it>`)."""
    from llmgw.accounts.tokens import create_token

    return create_token(user, "test", days).secret
