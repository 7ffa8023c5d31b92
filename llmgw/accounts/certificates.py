"""Node certificates: issue, check and revoke them, with the CA's files
(llmgw.accounts.ca) and a row per certificate issued.

A certificate authenticates only when the TLS server verified it against
the CA (llmgw.accounts.mtls) and it passes here too: signed by this CA,
in date, a client certificate naming one node, and on record and not
revoked (llmgw.inventory.services.revoke_node revokes them). The second look is not redundant: a server whose trust store was
set to a public bundle by mistake would otherwise let any certificate that
spells a node's name in as that node.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from django.conf import settings

from llmgw.accounts import ca
from llmgw.accounts.ca import CAError
from llmgw.accounts.models import NodeCertificate
from llmgw.database.atomic import atomic

__all__ = ["CAError", "authenticate", "issue", "lifetime", "revoke"]

# The CA certificate, read once per process: every authenticated request
# checks a signature against it. Keyed by directory, so a test that makes
# a CA of its own is not handed another one's.
_ca_certs: dict[Path, x509.Certificate] = {}


def lifetime() -> timedelta:
    return timedelta(seconds=settings.NODE_CERT_TTL_S)


def _ca_cert() -> x509.Certificate:
    directory = Path(settings.CA_DIR)
    if directory not in _ca_certs:
        _ca_certs[directory] = ca.load_cert(directory)
    return _ca_certs[directory]


@atomic
def issue(
    node: str,
    public_key: ca.NodeKey,
    issued_by: str,
    valid_for: timedelta | None = None,
    now: datetime | None = None,
) -> x509.Certificate:
    """Sign a certificate for `node` and keep its record. Called by the
    inventory, which has checked that the node may have one."""
    authority = ca.load(Path(settings.CA_DIR))
    cert = ca.issue_node(authority, node, public_key, valid_for or lifetime(), now)
    NodeCertificate.objects.create(
        serial=ca.serial_hex(cert),
        node_name=node,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        issued_by=issued_by,
    )
    return cert


def revoke(node: str, now: datetime) -> int:
    """Revoke the node's certificates still in force; how many were."""
    revoked: int = NodeCertificate.objects.filter(
        node_name=node, revoked_at__isnull=True, not_after__gt=now
    ).update(revoked_at=now)
    return revoked


def authenticate(pem: str, now: datetime | None = None) -> str:
    """The node a client certificate (PEM, as the TLS server saw it) stands
    for; CAError with the reason it is refused."""
    try:
        cert = x509.load_pem_x509_certificate(pem.encode())
    except ValueError:
        raise CAError("client certificate is not PEM") from None
    node = ca.node_of(cert, _ca_cert(), now or datetime.now(UTC))
    record = (
        NodeCertificate.objects.filter(serial=ca.serial_hex(cert))
        .values("node_name", "revoked_at")
        .first()
    )
    if record is None or record["node_name"] != node:
        raise CAError(f"certificate #{ca.serial_hex(cert)} of {node} is not on record")
    if record["revoked_at"] is not None:
        raise CAError(
            f"certificate #{ca.serial_hex(cert)} of {node} was revoked at "
            f"{record['revoked_at']:%Y-%m-%d %H:%M:%S} UTC"
        )
    return node
