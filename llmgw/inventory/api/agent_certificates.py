"""POST /api/agent/v1/certificate: a node renews its certificate."""

from __future__ import annotations

import msgspec
from drf_spectacular.utils import extend_schema
from llmgw_agent.protocol.certificates import CertificateRequest, IssuedCertificate
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from llmgw.inventory import node_certificates
from llmgw.inventory.api.agent_views import AgentView
from llmgw.inventory.api.auth import NodeCertificateAuthentication
from llmgw.inventory.api.openapi import json_schema
from llmgw.inventory.services import InventoryError


class RenewView(AgentView):
    # Only the certificate being replaced vouches for the request: a node
    # on a credential gets its first certificate from an operator, so a
    # stolen credential cannot be turned into a certificate that outlives
    # its revocation check.
    authentication_classes = [NodeCertificateAuthentication]
    message = CertificateRequest

    @extend_schema(
        request={"application/json": json_schema(CertificateRequest)},
        responses={200: json_schema(IssuedCertificate)},
    )
    def post(self, request: Request) -> Response:
        from llmgw.accounts import ca  # cryptography, for this endpoint alone

        data = self.parse(request)
        if isinstance(data, Response):
            return data
        try:
            cert = node_certificates.renew(request.auth, data["csr"])
        except (ca.CAError, InventoryError) as exc:
            return Response({"errors": {"csr": [str(exc)]}}, status=status.HTTP_400_BAD_REQUEST)
        answer = IssuedCertificate(
            node=request.auth.name,
            certificate=ca.cert_pem(cert),
            not_after=cert.not_valid_after_utc,
        )
        return Response(msgspec.to_builtins(answer))
