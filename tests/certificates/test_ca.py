"""The CA and the certificates' records, without a TLS server: what a certificate
must be to authenticate, and what revocation does to it."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from llmgw.accounts import ca, certificates
from llmgw.accounts.models import NodeCertificate
from llmgw.inventory import node_certificates, services
from llmgw.inventory.models import Node
from tests.certificates.conftest import Pki

pytestmark = pytest.mark.django_db


def test_init_writes_the_key_0600_and_refuses_a_second_ca(tmp_path: Path) -> None:
    authority = ca.init(tmp_path / "ca")
    assert stat.S_IMODE((tmp_path / "ca").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "ca" / ca.KEY_FILE).stat().st_mode) == 0o600
    assert authority.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    with pytest.raises(ca.CAError, match="a CA is already in"):
        ca.init(tmp_path / "ca")
    assert ca.load(tmp_path / "ca").cert == authority.cert


def test_a_node_certificate_names_its_node_and_is_recorded(pki: Pki) -> None:
    key = ca.new_key()
    cert = node_certificates.add_node("gpu-a", "ops", key.public_key())
    assert ca.node_of(cert, pki.authority.cert, datetime.now(UTC)) == "gpu-a"
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert life == timedelta(days=3) + ca.BACKDATE  # LLMGW_NODE_CERT_TTL_S's default
    record = NodeCertificate.objects.get()
    assert (record.serial, record.node_name, record.issued_by) == (
        ca.serial_hex(cert), "gpu-a", "ops",
    )  # fmt: skip
    assert certificates.authenticate(ca.cert_pem(cert)) == "gpu-a"
    assert Node.objects.filter(name="gpu-a").exists()


def test_revoking_a_node_refuses_every_certificate_it_holds(pki: Pki, make_node) -> None:
    _, credential = make_node("gpu-a")
    assert services.authenticate(credential) is not None
    pems = [
        ca.cert_pem(node_certificates.add_node("gpu-a", "ops", ca.new_key().public_key()))
        for _ in range(2)
    ]
    services.revoke_node("gpu-a", "ops")
    for pem in pems:
        with pytest.raises(ca.CAError, match=r"certificate #\w+ of gpu-a was revoked at"):
            certificates.authenticate(pem)
    assert NodeCertificate.objects.filter(revoked_at__isnull=True).count() == 0
    assert services.authenticate(credential) is None
    # Added again: a new certificate works, the old ones stay refused.
    fresh = node_certificates.add_node("gpu-a", "ops", ca.new_key().public_key())
    assert node_certificates.authenticate(ca.cert_pem(fresh)) == (Node.objects.get(), "")
    assert node_certificates.authenticate(pems[0])[0] is None


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        ("foreign", "certificate is not signed by this control plane's CA"),
        ("expired", "certificate expired at"),
        ("server", "certificate is not a client certificate (no clientAuth usage)"),
        ("unrecorded", "is not on record"),
    ],
)
def test_a_certificate_is_refused_with_its_reason(
    pki: Pki, tmp_path: Path, make: str, reason: str
) -> None:
    key = ca.new_key()
    if make == "foreign":
        cert = ca.issue_node(ca.init(tmp_path / "other"), "gpu-a", key.public_key(), timedelta(1))
    elif make == "expired":
        old = datetime.now(UTC) - timedelta(days=2)
        cert = certificates.issue("gpu-a", key.public_key(), "ops", timedelta(days=1), now=old)
    elif make == "server":
        cert = ca.issue_server(pki.authority, ["gpu-a"], timedelta(days=1))[1]
    else:
        cert = ca.issue_node(pki.authority, "gpu-a", key.public_key(), timedelta(days=1))
    with pytest.raises(ca.CAError) as refused:
        certificates.authenticate(ca.cert_pem(cert))
    assert reason in str(refused.value)


def test_renewal_takes_the_key_of_the_request_and_the_name_of_the_node(pki: Pki) -> None:
    node_certificates.add_node("gpu-a", "ops", ca.new_key().public_key())
    node = Node.objects.get(name="gpu-a")
    key = ca.new_key()
    # The request asks for another node's name: the certificate still names gpu-a.
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-b")]))
        .sign(key, hashes.SHA256())
    )
    cert = node_certificates.renew(node, csr.public_bytes(serialization.Encoding.PEM).decode())
    assert cert.public_key() == key.public_key()
    assert certificates.authenticate(ca.cert_pem(cert)) == "gpu-a"
    assert NodeCertificate.objects.get(serial=ca.serial_hex(cert)).issued_by == "renewal"


def test_renewal_refuses_a_weak_or_garbled_request(pki: Pki) -> None:
    node_certificates.add_node("gpu-a", "ops", ca.new_key().public_key())
    node = Node.objects.get(name="gpu-a")
    with pytest.raises(ca.CAError, match="csr: not a PEM certificate signing request"):
        node_certificates.renew(node, "-----BEGIN CERTIFICATE REQUEST-----\nxx\n")
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-a")]))
        .sign(weak, hashes.SHA256())
    )
    with pytest.raises(ca.CAError, match="an RSA key of 1024 bits is too short"):
        node_certificates.renew(node, csr.public_bytes(serialization.Encoding.PEM).decode())
    assert NodeCertificate.objects.count() == 1
