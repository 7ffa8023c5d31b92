"""`llmgw ca init`, `llmgw ca server-cert`, `llmgw node add NAME --cert` and
`llmgw node revoke`, as an operator types them beside the control plane."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from llmgw_agent import certificate

from llmgw import cli
from llmgw.accounts import ca, certificates
from llmgw.accounts.models import NodeCertificate
from llmgw.inventory.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def ca_dir(tmp_path: Path, settings: Any) -> Path:
    settings.CA_DIR = tmp_path / "ca"
    return settings.CA_DIR


def test_ca_init_then_node_add_with_a_certificate(
    ca_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["ca", "init"]) == 0
    out = capsys.readouterr().out
    assert f"CA created in {ca_dir}" in out
    key_text = (ca_dir / ca.KEY_FILE).read_text()
    assert "PRIVATE KEY" in key_text and key_text not in out
    assert cli.main(["ca", "init"]) == 1
    assert "a CA is already in" in capsys.readouterr().err

    out_dir = tmp_path / "gpu-a-cert"
    assert cli.main(["node", "add", "gpu-a", "--cert", "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    held = certificate.read(out_dir / "node.pem")
    assert held.node == "gpu-a"
    assert f"node gpu-a added with certificate #{held.serial}" in printed
    assert (out_dir / "node.key").read_text() not in printed
    for name in ("node.key", "node.pem", "ca.pem"):
        assert stat.S_IMODE((out_dir / name).stat().st_mode) == 0o600
    assert (out_dir / "ca.pem").read_text() == (ca_dir / ca.CERT_FILE).read_text()
    assert certificates.authenticate((out_dir / "node.pem").read_text()) == "gpu-a"
    assert AuditEvent.objects.filter(node_name="gpu-a", action="node-certificate").exists()

    assert cli.main(["node", "revoke", "gpu-a"]) == 0
    assert NodeCertificate.objects.get().revoked_at is not None


def test_node_add_with_a_certificate_needs_a_ca(
    ca_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["node", "add", "gpu-a", "--cert", "--out", str(tmp_path / "o")]) == 1
    assert "no CA in" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    # Nothing half-made: no node, no record.
    from llmgw.inventory.models import Node

    assert not Node.objects.filter(name="gpu-a").exists()
    assert not NodeCertificate.objects.exists()


def test_ca_server_cert_names_the_hosts_agents_connect_to(
    ca_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["ca", "init"])
    code = cli.main(["ca", "server-cert", "llmgw.example.internal", "10.0.0.5",
                     "--out", str(tmp_path / "tls")])  # fmt: skip
    assert code == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "tls" / "server.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["llmgw.example.internal"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    assert stat.S_IMODE((tmp_path / "tls" / "server.key").stat().st_mode) == 0o600
