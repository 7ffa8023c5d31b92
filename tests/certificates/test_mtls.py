"""mTLS over a real TLS handshake on loopback: the control plane under uvicorn
with the test's CA, the agent's own client with its certificate and key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from llmgw_agent import certificate
from llmgw_agent.client import AgentClient, AuthError

from llmgw.accounts import ca
from llmgw.accounts.models import NodeCertificate
from llmgw.inventory import services
from llmgw.inventory.models import AuditEvent, Node
from tests.certificates.conftest import Pki
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db(transaction=True)


def client(url: str, pki: Pki, cert: tuple[Path, Path] | None = None) -> AgentClient:
    cert_file, key_file = cert or (None, None)
    return AgentClient(url, ca_file=pki.ca_file, cert_file=cert_file, key_file=key_file)


def test_a_node_reports_with_its_certificate_and_only_as_itself(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    files = pki.node_files("gpu-a", tmp_path / "a")
    pki.node_files("gpu-b", tmp_path / "b")
    with client(tls_server, pki, files) as agent:
        assert agent.register(registration("gpu-a"))["node"] == "gpu-a"
        assert agent.heartbeat(heartbeat("gpu-a"))["node"] == "gpu-a"
        with pytest.raises(AuthError) as refused:
            agent.register(registration("gpu-b"))
    assert "403: {'node': ['this certificate belongs to gpu-a']}" in str(refused.value)
    assert Node.objects.get(name="gpu-a").registered_at is not None
    assert Node.objects.get(name="gpu-b").registered_at is None
    assert AuditEvent.objects.filter(node_name="gpu-a", action="impersonation-refused").exists()


def test_a_node_on_its_credential_keeps_working_beside_certificates(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    pki.node_files("gpu-a", tmp_path / "a")
    token = services.add_node("gpu-c", "test")
    with client(tls_server, pki) as agent:
        agent.join("gpu-c", token, tmp_path / "credential")
        assert agent.register(registration("gpu-c"))["node"] == "gpu-c"
        assert agent.heartbeat(heartbeat("gpu-c"))["node"] == "gpu-c"
        # A credential is no way to a certificate: renewal takes the one held.
        with pytest.raises(AuthError, match="401"):
            agent.post("/api/agent/v1/certificate", {"schema": 1, "node": "gpu-c", "csr": "x"})


def test_a_revoked_node_is_refused_with_its_certificate_and_its_credential(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    files = pki.node_files("gpu-a", tmp_path / "a")
    with client(tls_server, pki, files) as agent:
        agent.register(registration("gpu-a"))
        services.revoke_node("gpu-a", "test")
        with pytest.raises(AuthError) as refused:
            agent.heartbeat(heartbeat("gpu-a"))
    serial = certificate.read(files[0]).serial
    assert f"certificate #{serial} of gpu-a was revoked at" in str(refused.value)
    assert NodeCertificate.objects.get(serial=serial).revoked_at is not None


def test_an_expired_certificate_is_refused_at_the_handshake(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    Node.objects.create(name="gpu-a")
    files = pki.node_files(
        "gpu-a", tmp_path / "a", timedelta(hours=1), now=datetime.now(UTC) - timedelta(days=1)
    )
    with client(tls_server, pki, files) as agent, pytest.raises(AuthError) as refused:
        agent.register(registration("gpu-a"))
    serial = certificate.read(files[0]).serial
    # The server's TLS ends the handshake without a word: the agent says why.
    assert f"refused certificate #{serial}: it expired at" in str(refused.value)
    assert "`llmgw node add gpu-a --cert` issues a new one" in str(refused.value)
    assert Node.objects.get(name="gpu-a").registered_at is None


def test_a_certificate_of_another_ca_is_refused_at_the_handshake(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    Node.objects.create(name="gpu-a")
    foreign = ca.init(tmp_path / "foreign")
    key = ca.new_key()
    cert = ca.issue_node(foreign, "gpu-a", key.public_key(), timedelta(hours=1))
    (tmp_path / "node.key").write_text(ca.key_pem(key))
    (tmp_path / "node.pem").write_text(ca.cert_pem(cert))
    files = (tmp_path / "node.pem", tmp_path / "node.key")
    with client(tls_server, pki, files) as agent, pytest.raises(AuthError) as refused:
        agent.register(registration("gpu-a"))
    assert f"(issued by {foreign.cert.issuer.rfc4514_string()})" in str(refused.value)
    assert "the certificate is not signed by the control plane's CA" in str(refused.value)
    assert Node.objects.get(name="gpu-a").registered_at is None


def test_the_agent_renews_before_expiry_and_uses_the_new_certificate_at_once(
    tls_server: str, pki: Pki, tmp_path: Path
) -> None:
    Node.objects.create(name="gpu-a")
    # Ten minutes, issued nine minutes ago: past two thirds of its life.
    files = pki.node_files(
        "gpu-a", tmp_path / "a", timedelta(minutes=10), now=datetime.now(UTC) - timedelta(minutes=9)
    )
    old_key = files[1].read_bytes()
    before = certificate.read(files[0])
    with client(tls_server, pki, files) as agent:
        agent.register(registration("gpu-a"))
        after = certificate.read(files[0])
        assert after.serial != before.serial
        # LLMGW_NODE_CERT_TTL_S of the server: an hour.
        assert timedelta(minutes=55) < after.not_after - datetime.now(UTC) < timedelta(hours=1)
        assert files[1].read_bytes() != old_key
        assert files[1].stat().st_mode & 0o777 == 0o600
        # The old certificate revoked: the next request goes through only with the new one.
        NodeCertificate.objects.filter(serial=before.serial).update(revoked_at=datetime.now(UTC))
        assert agent.heartbeat(heartbeat("gpu-a"))["node"] == "gpu-a"
    record = NodeCertificate.objects.get(serial=after.serial)
    assert (record.node_name, record.issued_by) == ("gpu-a", "renewal")


def test_a_certificate_not_yet_due_is_kept(tls_server: str, pki: Pki, tmp_path: Path) -> None:
    files = pki.node_files("gpu-a", tmp_path / "a")
    before = certificate.read(files[0])
    with client(tls_server, pki, files) as agent:
        agent.register(registration("gpu-a"))
        agent.heartbeat(heartbeat("gpu-a"))
    assert certificate.read(files[0]).serial == before.serial
    assert NodeCertificate.objects.filter(node_name="gpu-a").count() == 1
