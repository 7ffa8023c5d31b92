"""agent.yaml's cert_file and key_file (mTLS): both or neither, over https, and a
node with them needs no credential_file."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmgw_agent.config import ConfigError, parse_config

CERT = "server_url: https://cp.example\nnode: n1\ncert_file: node.pem\nkey_file: node.key\n"


def test_a_certificate_instead_of_a_credential(tmp_path: Path) -> None:
    config = parse_config(CERT, base=tmp_path)
    assert (config.cert_file, config.key_file) == (tmp_path / "node.pem", tmp_path / "node.key")
    assert config.credential_file == Path("/var/lib/llmgw-agent/credential")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (CERT.replace("key_file: node.key\n", ""), "agent.yaml:3: cert_file: needs key_file too"),
        (CERT.replace("cert_file: node.pem\n", ""), "agent.yaml:3: key_file: needs cert_file too"),
        (
            CERT.replace("https://", "http://"),
            "agent.yaml:3: cert_file: a client certificate needs an https:// server",
        ),
        ("server_url: https://cp.example\nnode: n1\n", "credential_file: required (or cert_file"),
    ],
)
def test_a_bad_certificate_setting_is_named(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(text)
    assert error in str(refused.value)
