"""`Authorization: Token <secret>` for the REST API, against ApiToken's
digests. The header is the one DRF's authtoken used, so the CLI and every
configuration written for it keep working."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from llmgw.accounts import tokens


class TokenAuthentication(BaseAuthentication):  # type: ignore[misc]  # DRF ships no types
    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        words = get_authorization_header(request).split()
        if not words or words[0].lower() != self.keyword.lower().encode():
            return None
        if len(words) != 2:
            raise AuthenticationFailed(f"expected `Authorization: {self.keyword} <token>`")
        try:
            secret = words[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("invalid token") from None
        try:
            token = tokens.authenticate(secret)
        except tokens.TokenRefused as refused:
            raise AuthenticationFailed(str(refused)) from None
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
