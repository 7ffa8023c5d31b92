"""The node's certificate (mTLS): when to renew it, the request for a new one, and
writing the new pair in place of the old.

A renewal is a new key made here and a certificate signing request for it: the
private key never leaves the node, and a key copied off the node stops being
useful at the next renewal as well as at the old certificate's expiry.

cryptography is imported by the functions that use it: a node on a credential
never loads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

# Renew once this share of the certificate's life has passed: with a three-day
# certificate that leaves a day for a control plane that is down or a node that is off.
RENEW_AT = 2 / 3


class CertificateError(Exception):
    """The node's certificate or key cannot be read; the message names the file."""


@dataclass(frozen=True)
class Held:
    node: str
    serial: str
    not_before: datetime
    not_after: datetime
    issuer: str

    @property
    def renew_at(self) -> datetime:
        return self.not_before + (self.not_after - self.not_before) * RENEW_AT


def read(cert_file: Path) -> Held:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except OSError as exc:
        raise CertificateError(f"{cert_file}: cannot read: {exc.strerror}") from None
    except ValueError:
        raise CertificateError(f"{cert_file}: not a PEM certificate") from None
    return _held(cert, str(cert_file))


def _held(cert: x509.Certificate, source: str) -> Held:
    from cryptography.x509.oid import NameOID

    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(names) != 1 or not isinstance(names[0], str):
        raise CertificateError(f"{source}: the certificate names no node")
    return Held(
        names[0],
        format(cert.serial_number, "x"),
        cert.not_valid_before_utc,
        cert.not_valid_after_utc,
        cert.issuer.rfc4514_string(),
    )


def request(node: str) -> tuple[ec.EllipticCurvePrivateKey, str]:
    """A new key and a PEM signing request for it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .sign(key, hashes.SHA256())
    )
    return key, csr.public_bytes(serialization.Encoding.PEM).decode()


def _write(path: Path, data: bytes) -> Path:
    """`data` in a 0600 temporary file beside `path`, fsynced; returns its name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def store(
    key: ec.EllipticCurvePrivateKey, cert_pem: str, key_file: Path, cert_file: Path, node: str
) -> Held:
    """Put the new pair in place of the old, once the certificate is shown to be for
    this key and this node. Both are written whole before either is renamed, so the
    pair is mismatched only between two renames, never for a partial write."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
    except ValueError:
        raise CertificateError("the control plane's answer is not a PEM certificate") from None
    if cert.public_key() != key.public_key():
        raise CertificateError("the control plane's certificate is not for the key sent")
    held = _held(cert, "the control plane's certificate")
    if held.node != node:
        raise CertificateError(f"the control plane's certificate names {held.node}, not {node}")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    new_key, new_cert = _write(key_file, key_pem), _write(cert_file, cert_pem.encode())
    os.replace(new_key, key_file)
    os.replace(new_cert, cert_file)
    return held
