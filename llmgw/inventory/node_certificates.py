"""A node's certificate identity, beside its credential: the operator
issues the first certificate (`llmgw node add NAME --cert`), the agent
renews it with the one it holds, and `llmgw node revoke` refuses both.

The CA and the certificates' records are the accounts app's
(llmgw.accounts.certificates); what is the inventory's is whether the node
may have one: it exists, and is not revoked.

cryptography is imported by the functions that use it, so that the agent
API and the command stream, which import this, load it only for a
connection that came with a certificate.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from llmgw.database.atomic import atomic
from llmgw.inventory import commands
from llmgw.inventory.models import AuditEvent, Node
from llmgw.inventory.services import NODE_NAME, InventoryError

if TYPE_CHECKING:
    from cryptography import x509

    from llmgw.accounts.ca import NodeKey

log = logging.getLogger("llmgw.inventory")


@atomic
def add_node(
    name: str, actor: str, public_key: NodeKey, valid_for: timedelta | None = None
) -> x509.Certificate:
    """Create (or re-open) a node and sign its first certificate for
    `public_key`. A node that was revoked is re-opened: its old
    certificates and credential stay refused."""
    from llmgw.accounts import ca, certificates

    if not NODE_NAME.match(name):
        raise InventoryError(
            f"node name {name!r} is refused: an agent reports as letters, digits, '.', '_' "
            f"and '-', starting with a letter or a digit, 253 characters at most"
        )
    node, _ = Node.objects.select_for_update().get_or_create(name=name)
    if node.revoked_at is not None:
        node.revoked_at = None
        node.save(update_fields=["revoked_at"])
    try:
        cert = certificates.issue(name, public_key, actor, valid_for)
    except ca.CAError as exc:
        raise InventoryError(str(exc)) from None
    AuditEvent.objects.create(
        node_name=name, actor=actor, action="node-certificate", detail=f"#{ca.serial_hex(cert)}"
    )
    return cert


def client_certificate(scope: dict[str, Any] | None) -> str | None:
    """The verified client certificate (PEM) of the connection, from the
    ASGI "tls" extension (llmgw.accounts.mtls); None when there is none
    (plain HTTP, or TLS without a client certificate)."""
    tls = ((scope or {}).get("extensions") or {}).get("tls") or {}
    chain = tls.get("client_cert_chain") or []
    return chain[0] if chain else None


def authenticate_stream(pem: str) -> tuple[Node | None, str]:
    """The node of a command stream opened with a certificate, and what the
    stream holds (commands.holds): the certificate, by its serial."""
    from cryptography import x509

    from llmgw.accounts import ca

    node, _ = authenticate(pem)
    serial = ca.serial_hex(x509.load_pem_x509_certificate(pem.encode()))
    return node, commands.CERT_HELD + serial


def authenticate(pem: str) -> tuple[Node | None, str]:
    """The node of a verified client certificate, or None and the reason."""
    from llmgw.accounts import ca, certificates

    try:
        name = certificates.authenticate(pem)
    except ca.CAError as exc:
        return None, str(exc)
    node = Node.objects.filter(name=name).first()
    if node is None:
        return None, f"node {name} is not in the inventory"
    if node.revoked_at is not None:
        return None, f"node {name} was revoked at {node.revoked_at:%Y-%m-%d %H:%M:%S} UTC"
    return node, ""


@atomic
def renew(node: Node, csr_pem: str) -> x509.Certificate:
    """A fresh certificate for the key of `csr_pem`, for the node whose
    certificate asked: the request's own subject is never read."""
    from llmgw.accounts import ca, certificates

    public_key = ca.public_key_of_csr(csr_pem)  # CAError names what is wrong
    # Locked, so a revocation committing meanwhile is not undone by a renewal.
    locked = Node.objects.select_for_update().get(pk=node.pk)
    if locked.revoked_at is not None:
        raise InventoryError(f"node {node.name} is revoked")
    cert = certificates.issue(node.name, public_key, "renewal")
    AuditEvent.objects.create(
        node_name=node.name, actor=node.name, action="node-certificate-renewed",
        detail=f"#{ca.serial_hex(cert)}",
    )  # fmt: skip
    log.info("node %s renewed its certificate: #%s", node.name, ca.serial_hex(cert))
    return cert
