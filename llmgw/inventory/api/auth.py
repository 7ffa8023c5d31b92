"""Authentication for the agent API: every request is one node, and only
that node."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from llmgw.inventory import services
from llmgw.inventory.models import Node


class NodeCredentialAuthentication(authentication.BaseAuthentication):
    keyword = "Node"

    def authenticate(self, request: Request) -> tuple[Any, Node] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        scheme, _, credential = header.partition(" ")
        if scheme != self.keyword:
            return None
        node = services.authenticate(credential)
        if node is None:
            raise exceptions.AuthenticationFailed("unknown or revoked node credential")
        return AnonymousUser(), node

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
