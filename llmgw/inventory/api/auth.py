"""Authentication for the agent API: every request is one node, and only
that node. A node proves it with its credential (`Authorization: Node
...`) or with the client certificate the TLS server verified
(llmgw.accounts.mtls), whichever it was given."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from llmgw.inventory import node_certificates, services
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


class NodeCertificateAuthentication(authentication.BaseAuthentication):
    """A connection that came with a client certificate is that
    certificate's node, or refused with the reason: a credential header
    beside it is not a second chance."""

    def authenticate(self, request: Request) -> tuple[Any, Node] | None:
        pem = node_certificates.client_certificate(getattr(request._request, "scope", None))
        if pem is None:
            return None
        node, reason = node_certificates.authenticate(pem)
        if node is None:
            raise exceptions.AuthenticationFailed(f"client certificate refused: {reason}")
        return AnonymousUser(), node

    def authenticate_header(self, request: Request) -> str:
        return NodeCredentialAuthentication.keyword
