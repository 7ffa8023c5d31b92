"""A certificate authority of the test's own, and the control plane under
uvicorn with TLS that asks for client certificates (llmgw.accounts.mtls)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from llmgw.accounts import ca


@dataclass
class Pki:
    directory: Path
    authority: ca.Authority

    @property
    def ca_file(self) -> Path:
        return self.directory / ca.CERT_FILE

    def node_files(
        self, node: str, folder: Path, valid_for: timedelta | None = None, **issue: Any
    ) -> tuple[Path, Path]:
        """Node `node` added with a certificate (as `llmgw node add --cert`
        does); its (cert_file, key_file) written under `folder`."""
        from llmgw.accounts import certificates
        from llmgw.inventory import node_certificates

        key = ca.new_key()
        if issue:  # a certificate backdated or short: straight from the CA
            cert = certificates.issue(node, key.public_key(), "test", valid_for, **issue)
        else:
            cert = node_certificates.add_node(node, "test", key.public_key(), valid_for)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "node.key").write_text(ca.key_pem(key))
        (folder / "node.pem").write_text(ca.cert_pem(cert))
        return folder / "node.pem", folder / "node.key"


@pytest.fixture
def pki(tmp_path: Path, settings: Any) -> Pki:
    directory = tmp_path / "ca"
    authority = ca.init(directory)
    settings.CA_DIR = directory
    return Pki(directory, authority)


@pytest.fixture
def tls_server(transactional_db: Any, pki: Pki, tmp_path: Path) -> Iterator[str]:
    """The control plane on https://127.0.0.1:PORT, its certificate from the
    test's CA, client certificates asked for and verified against it."""
    from django.conf import settings

    from tests.servers import start_uvicorn

    key, cert = ca.issue_server(pki.authority, ["127.0.0.1"], timedelta(days=1))
    (tmp_path / "server.key").write_text(ca.key_pem(key))
    (tmp_path / "server.pem").write_text(ca.cert_pem(cert))
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "LLMGW_CA_DIR": str(pki.directory),
        "LLMGW_NODE_CERT_TTL_S": "3600",
    }
    options = [
        "--ssl-certfile", str(tmp_path / "server.pem"),
        "--ssl-keyfile", str(tmp_path / "server.key"),
        "--ssl-ca-certs", str(pki.ca_file),
        "--ssl-cert-reqs", "1",  # ssl.CERT_OPTIONAL: nodes on a credential send none
        "--http", "llmgw.accounts.mtls:HTTPProtocol",
        "--ws", "llmgw.accounts.mtls:WebSocketProtocol",
    ]  # fmt: skip
    with start_uvicorn(options=options, env=env) as server:
        yield f"https://127.0.0.1:{server.port}"
