"""`llmgw ca ...` and `llmgw node add NAME --cert`: run where the CA is,
beside the control plane, on its database and data directory."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

from django.conf import settings

from llmgw.accounts import ca
from llmgw.private import private_dir, write_private

# What `node add --cert` writes, the names agent.yaml's cert_file, key_file
# and ca_file point at (deploy/onboard-node.sh copies them as they are).
NODE_KEY, NODE_CERT, CA_CERT = "node.key", "node.pem", "ca.pem"


def init_command() -> int:
    directory = Path(settings.CA_DIR)
    try:
        authority = ca.init(directory)
    except ca.CAError as exc:
        print(f"llmgw ca init: {exc}", file=sys.stderr)
        return 1
    print(f"CA created in {directory}: {ca.CERT_FILE} (give it to agents as ca_file), ")
    print(f"  {ca.KEY_FILE} (mode 0600: never copy it off this machine)")
    print(f"  valid until {authority.cert.not_valid_after_utc:%Y-%m-%d} UTC")
    return 0


def server_cert_command(names: list[str], out: str, days: int) -> int:
    """The control plane's HTTPS key and certificate, signed by the CA."""
    try:
        authority = ca.load(Path(settings.CA_DIR))
    except ca.CAError as exc:
        print(f"llmgw ca server-cert: {exc}", file=sys.stderr)
        return 1
    key, cert = ca.issue_server(authority, names, timedelta(days=days))
    folder = private_dir(Path(out))
    write_private(folder / "server.key", ca.key_pem(key))
    write_private(folder / "server.pem", ca.cert_pem(cert))
    print(f"{folder}/server.pem and server.key for {', '.join(names)}, valid {days} days")
    return 0


def node_cert_command(name: str, out: str | None) -> int:
    """Create or re-open node NAME and write its first key and certificate
    to a folder of their own, to be copied to the node (onboard-node.sh
    does). The key is made here because the node has no way yet to ask for
    a certificate; every renewal after this is a key the node made."""
    from llmgw.inventory import node_certificates
    from llmgw.inventory.services import InventoryError

    key = ca.new_key()
    try:
        cert = node_certificates.add_node(name, os.environ.get("USER", "cli"), key.public_key())
    except InventoryError as exc:
        print(f"llmgw node add: {exc}", file=sys.stderr)
        return 1
    folder = private_dir(Path(out or f"{name}-cert"))
    write_private(folder / NODE_KEY, ca.key_pem(key))
    write_private(folder / NODE_CERT, ca.cert_pem(cert))
    write_private(folder / CA_CERT, (Path(settings.CA_DIR) / ca.CERT_FILE).read_text())
    print(
        f"node {name} added with certificate #{ca.serial_hex(cert)}, valid until "
        f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC (the agent renews it before then)"
    )
    print(f"  {folder}/{NODE_KEY}, {NODE_CERT}, {CA_CERT}: copy them to the node")
    print("  for agent.yaml's key_file, cert_file and ca_file, then delete this folder")
    return 0
