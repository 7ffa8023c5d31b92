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
from llmgw.inventory.api import agent_request
from llmgw.inventory.models import Node

REFUSED = "unknown or revoked node credential"


class NodeCredentialAuthentication(authentication.BaseAuthentication):  # type: ignore[misc]
    keyword = agent_request.SCHEME

    def authenticate(self, request: Request) -> tuple[Any, Node] | None:
        credential = agent_request.credential(authentication.get_authorization_header(request))
        if credential is None:
            return None
        # The lean path's statement already found this credential refused:
        # asking the database again would only say so a second time.
        scope = getattr(request._request, "scope", None) or {}
        if scope.get(agent_request.REFUSED) == credential.text:
            raise exceptions.AuthenticationFailed(REFUSED)
        node = services.authenticate(credential.text)
        if node is None:
            raise exceptions.AuthenticationFailed(REFUSED)
        return AnonymousUser(), node

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class NodeCertificateAuthentication(authentication.BaseAuthentication):  # type: ignore[misc]
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
