"""The control plane's certificate authority: its key and certificate on
disk, and the node certificates it signs.

Pure cryptography, no ORM: llmgw.accounts.certificates stores what is
issued. The key is written 0600 from its first byte (llmgw.private) and
never logged or shown; the web processes read it to sign renewals, so it
lives in the control plane's data directory and nowhere else.

A node certificate names its node twice, as the subject's common name and
as the one DNS name of its subjectAltName, and may only be used by a TLS
client (extendedKeyUsage clientAuth): a certificate the CA made for the
control plane's own HTTPS cannot be replayed as a node.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmgw.private import private_dir, write_private

KEY_FILE, CERT_FILE = "ca.key", "ca.pem"
CA_LIFETIME = timedelta(days=3650)
# The clocks of the CA and a node may disagree by this much without a fresh
# certificate being "not yet valid" on arrival.
BACKDATE = timedelta(minutes=5)
# Public keys a node may ask a certificate for.
NodeKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey


class CAError(Exception):
    """A refused CA operation or certificate, with a reason fit to show."""


@dataclass(frozen=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def serial_hex(cert: x509.Certificate) -> str:
    return format(cert.serial_number, "x")


def init(directory: Path, name: str | None = None, now: datetime | None = None) -> Authority:
    """Create the CA in `directory`; refuses when one is there already, since
    a second CA would orphan every certificate the first one signed."""
    directory = private_dir(directory)
    if (directory / KEY_FILE).exists() or (directory / CERT_FILE).exists():
        raise CAError(f"a CA is already in {directory}; remove it first to start a new one")
    now = now or datetime.now(UTC)
    # Named for where and when it was made: an agent told its certificate's
    # issuer can then tell this CA from another one made the same way.
    name = name or f"llmgw node CA {socket.gethostname()} {now:%Y-%m-%d %H:%M:%S}"
    key = new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    # The key first: a certificate without its key is a CA nobody can use,
    # and init() refuses to run over either.
    write_private(directory / KEY_FILE, key_pem(key), replace=False)
    write_private(directory / CERT_FILE, cert_pem(cert), replace=False)
    return Authority(key, cert)


def load(directory: Path) -> Authority:
    try:
        key = serialization.load_pem_private_key((directory / KEY_FILE).read_bytes(), None)
        cert = x509.load_pem_x509_certificate((directory / CERT_FILE).read_bytes())
    except FileNotFoundError:
        raise CAError(f"no CA in {directory}: run `llmgw ca init` first") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CAError(f"{directory / KEY_FILE}: not an EC key")
    return Authority(key, cert)


def load_cert(directory: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate((directory / CERT_FILE).read_bytes())
    except FileNotFoundError:
        raise CAError(f"no CA in {directory}: run `llmgw ca init` first") from None


def _builder(
    ca: Authority, subject: str, public_key: NodeKey, lifetime: timedelta, now: datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca.cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )


def issue_node(
    ca: Authority, node: str, public_key: NodeKey, lifetime: timedelta, now: datetime | None = None
) -> x509.Certificate:
    now = now or datetime.now(UTC)
    return (
        _builder(ca, node, public_key, lifetime, now)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )


def issue_server(
    ca: Authority, names: list[str], lifetime: timedelta, now: datetime | None = None
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and certificate for the control plane's HTTPS, so that agents
    need trust only this CA (agent.yaml's ca_file)."""
    import ipaddress

    now = now or datetime.now(UTC)
    key = new_key()
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    cert = (
        _builder(ca, names[0], key.public_key(), lifetime, now)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return key, cert


def public_key_of_csr(pem: str) -> NodeKey:
    """The public key of a certificate signing request, once its signature
    proves the sender holds the private key. The subject it asks for is
    ignored: the name comes from the certificate the request came with."""
    try:
        csr = x509.load_pem_x509_csr(pem.encode())
    except ValueError as exc:
        raise CAError(f"csr: not a PEM certificate signing request ({exc})") from None
    if not csr.is_signature_valid:
        raise CAError("csr: its signature does not match its public key")
    key = csr.public_key()
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < 2048:
        raise CAError(f"csr: an RSA key of {key.key_size} bits is too short (2048 at least)")
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.key_size < 256:
        raise CAError(f"csr: the curve {key.curve.name} is too small (256 bits at least)")
    if not isinstance(key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey):
        raise CAError(f"csr: a {type(key).__name__} is not accepted (EC, RSA or Ed25519)")
    return key


def node_of(cert: x509.Certificate, ca_cert: x509.Certificate, now: datetime) -> str:
    """The node `cert` names, once it is shown to be this CA's, a client
    certificate and in date; CAError says which of these it is not."""
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        raise CAError("certificate is not signed by this control plane's CA") from None
    if now > cert.not_valid_after_utc:
        raise CAError(f"certificate expired at {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC")
    if now < cert.not_valid_before_utc:
        raise CAError(
            f"certificate is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC"
        )
    try:
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise CAError("certificate has no extendedKeyUsage or subjectAltName") from None
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usage:
        raise CAError("certificate is not a client certificate (no clientAuth usage)")
    dns = names.get_values_for_type(x509.DNSName)
    common = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(dns) != 1 or common != dns:
        raise CAError("certificate does not name exactly one node in its subject and DNS name")
    return dns[0]
