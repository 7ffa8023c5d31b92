"""uvicorn protocols that hand the verified client certificate to the app.

uvicorn verifies a client certificate when told to (`--ssl-ca-certs` with
`--ssl-cert-reqs 1`: asked for, checked against the CA when given, not
required, so nodes on a credential keep connecting), but does not tell the
application which certificate it was: it does not fill the ASGI "tls"
extension. These classes do, for HTTP and for WebSockets, by wrapping the
app of each connection once its handshake is done:

    uvicorn llmgw.asgi:application --ssl-certfile server.pem \\
        --ssl-keyfile server.key --ssl-ca-certs ca.pem --ssl-cert-reqs 1 \\
        --http llmgw.accounts.mtls:HTTPProtocol \\
        --ws llmgw.accounts.mtls:WebSocketProtocol

The certificate comes from the TLS connection itself, not from a header a
client could write, so nothing needs to be trusted about who sent it. A
front proxy that ends TLS instead would have to pass the certificate in a
header, and every web process would then have to know which addresses
may set it; with no proxy in the shipped layout, there is nothing to get
wrong. No Django here: uvicorn imports this before the app.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.websockets.auto import AutoWebSocketsProtocol

Scope = dict[str, Any]


def tls_extension(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """The ASGI "tls" extension of a connection (asgiref's TLS spec), or
    None over plain TCP. `client_cert_chain` holds the client's certificate
    only when the handshake verified it against the CA; OpenSSL ended the
    handshake already for one it could not verify."""
    obj = transport.get_extra_info("ssl_object")
    if not isinstance(obj, ssl.SSLObject | ssl.SSLSocket):
        return None
    der = obj.getpeercert(binary_form=True)
    cipher = obj.cipher()
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(obj.version() or ""),
        "cipher_suite": None if cipher is None else cipher[0],
    }


# The numbers the ASGI TLS extension spells versions with.
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


class _WithTLS:
    def __init__(self, app: Any, tls: dict[str, Any]) -> None:
        self.app, self.tls = app, tls

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, "extensions": {**(scope.get("extensions") or {}), "tls": self.tls}}
        await self.app(scope, receive, send)


def _wrap(protocol: Any, transport: asyncio.BaseTransport) -> None:
    tls = tls_extension(transport)
    if tls is not None:
        protocol.app = _WithTLS(protocol.app, tls)


# uvicorn picks these two bases at import time: to mypy they are variables, not classes.
class HTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    def connection_made(self, transport: asyncio.BaseTransport, *args: Any) -> None:
        _wrap(self, transport)
        super().connection_made(transport, *args)


class WebSocketProtocol(AutoWebSocketsProtocol):  # type: ignore[misc,valid-type]
    def connection_made(self, transport: asyncio.BaseTransport, *args: Any) -> None:
        _wrap(self, transport)
        super().connection_made(transport, *args)
