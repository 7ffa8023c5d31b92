"""Renewing a node certificate: the agent sends a certificate signing
request for a key it made, over a connection authenticated by the
certificate it holds, and gets the new certificate back. Its private key
never leaves the node."""

from __future__ import annotations

from datetime import datetime

import msgspec

from .bounds import Name, Str4096
from .messages import Message, Schema

RENEW = "/api/agent/v1/certificate"


class CertificateRequest(Message, kw_only=True):
    schema: Schema
    node: Name
    # PEM; an RSA-4096 request is under 2 KiB.
    csr: Str4096


class IssuedCertificate(msgspec.Struct, kw_only=True):
    node: str
    certificate: str
    not_after: datetime
