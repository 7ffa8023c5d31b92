"""The agent's side of docs/agent-protocol.md: join, register, heartbeat, and retrying them.

Never logs the credential or the join token: they are sent only in headers and bodies,
and no exception raised here carries either.
"""

from __future__ import annotations

import logging
import os
import random
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec

from . import __version__, certificate
from .protocol import SCHEMA
from .protocol.certificates import RENEW, CertificateRequest
from .protocol.messages import Join

log = logging.getLogger("llmgw_agent.client")

JOIN, REGISTER, HEARTBEAT = (
    "/api/agent/v1/join",
    "/api/agent/v1/register",
    "/api/agent/v1/heartbeat",
)


# The longest wait between two attempts. An agent must be back within 15 s of the control
# plane recovering: this wait, plus the attempt that failed just before the recovery.
RETRY_CAP_S = 10.0
# How long one request may take, connecting included, before the next URL is tried.
TIMEOUT_S = 10.0


class TransientError(Exception):
    """The server could not be reached or failed (connection, timeout, 5xx, 429): retry."""


class _Unavailable(TransientError):
    """This URL cannot serve now (connection, timeout, 5xx): another one may."""


class AuthError(Exception):
    """401/403: the credential was revoked or the node removed. Retry slowly, do not crash."""


class RejectedError(Exception):
    """Any other 4xx: this payload was refused and sending it again will not help."""

    def __init__(self, status: int, detail: object) -> None:
        super().__init__(f"refused with {status}: {detail}")
        self.status, self.detail = status, detail


def read_credential(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def write_credential(path: Path, credential: str) -> None:
    """Write atomically with mode 0600 from the first byte: never briefly world-readable."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a leftover tmp file
        os.write(fd, credential.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class Backoff:
    """Exponential backoff with jitter, capped: a fleet coming back from one outage must
    not hit the control plane in lockstep. Half of each delay is random, so it never
    drops to zero; no delay is longer than `cap`."""

    def __init__(
        self, base: float = 1.0, cap: float = RETRY_CAP_S, rng: Callable[[], float] = random.random
    ) -> None:
        self.base, self.cap, self.rng = base, cap, rng
        self.attempt = 0

    def next(self) -> float:
        # The exponent stops growing once past the cap: 2.0**2000 would overflow a float.
        ceiling = min(self.cap, self.base * 2.0 ** min(self.attempt, 32))
        self.attempt += 1
        return ceiling / 2 + self.rng() * ceiling / 2

    def reset(self) -> None:
        self.attempt = 0


class AgentClient:
    """Posts to the control plane at one of `server_url` (one URL, or several web processes
    in order). A URL that cannot be reached, times out or answers 5xx is passed over at
    once for the next; the client keeps to the one that answers. Only when every URL failed
    does the request fail, and the caller back off."""

    def __init__(
        self,
        server_url: str | Sequence[str],
        *,
        credential: str | None = None,
        ca_file: Path | None = None,
        timeout_s: float = TIMEOUT_S,
        cert_file: Path | None = None,
        key_file: Path | None = None,
    ) -> None:
        urls = [server_url] if isinstance(server_url, str) else list(server_url)
        if not urls:
            raise ValueError("no control-plane URL")
        self.urls = tuple(url.rstrip("/") for url in urls)
        # Read by the command stream's thread: an int, replaced whole, never torn.
        self._current = 0
        self.credential = credential
        self.ca_file, self.timeout_s = ca_file, timeout_s
        # mTLS: the node is its certificate, and sends no credential.
        self.cert_file, self.key_file = cert_file, key_file
        self._renew_check = 0.0
        self._loaded: tuple[int, int] | None = None
        self._http = self._client()

    def _client(self) -> httpx.Client:
        verify: ssl.SSLContext | str | bool = str(self.ca_file) if self.ca_file else True
        # The command stream's TLS: ca_file trusted, and the node's certificate under mTLS.
        stream = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        if self.cert_file is not None and self.key_file is not None:
            import certifi  # httpx's own trust store, when no ca_file is given

            context = ssl.create_default_context(cafile=str(self.ca_file or certifi.where()))
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as exc:
                raise certificate.CertificateError(
                    f"{self.cert_file} with {self.key_file}: cannot load ({exc})"
                ) from None
            stat = self.cert_file.stat()
            self._loaded = (stat.st_mtime_ns, stat.st_ino)
            verify = stream = context
        self._context = stream
        return httpx.Client(
            timeout=self.timeout_s,
            verify=verify,
            headers={"User-Agent": f"llmgw-agent/{__version__}"},
        )

    def stream_identity(self) -> tuple[dict[str, str], ssl.SSLContext | None] | None:
        """How the command stream proves this node: its headers and its TLS context;
        None while there is nothing to prove it with (not joined yet)."""
        if self.cert_file is not None:
            return {}, self._context
        if self.credential is None:
            return None
        return {"Authorization": f"Node {self.credential}"}, self._context

    def _reload_if_replaced(self) -> None:
        """A certificate written over the one in use (a renewal, or an operator who
        issued a new one) is used from the next request on, without a restart: a new
        connection pool, since a kept-alive connection goes on presenting the old one."""
        if self.cert_file is None:
            return
        try:
            stat = self.cert_file.stat()
        except OSError:
            return
        if (stat.st_mtime_ns, stat.st_ino) == self._loaded:
            return
        try:
            fresh = self._client()
        except certificate.CertificateError as exc:
            # Caught between the key's rename and the certificate's, or a bad copy:
            # keep the pair that works, and look again at the next request.
            log.error("keeping the certificate in use: %s", exc)
            return
        old, self._http = self._http, fresh
        old.close()
        log.info("using the certificate now in %s", self.cert_file)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def server_url(self) -> str:
        """The URL in use: the last one that answered, or the next to try."""
        return self.urls[self._current]

    def post(
        self, path: str, payload: msgspec.Struct | Mapping[str, Any], auth: bool = True
    ) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if auth and self.cert_file is not None:
            if path != RENEW:
                self._renew_if_due()
            self._reload_if_replaced()
        elif auth:
            if self.credential is None:
                raise AuthError("no credential: join first")
            headers["Authorization"] = f"Node {self.credential}"
        body = msgspec.json.encode(payload)
        failures = []
        # One round: each URL once, from the one in use; no waiting in between, since
        # another web process is no busier for this one having failed.
        for tried in range(1, len(self.urls) + 1):
            url = self.server_url
            try:
                return self._post(url, path, body, headers)
            except _Unavailable as exc:
                failures.append(f"{url}: {exc}")
                self._current = (self._current + 1) % len(self.urls)
                if tried < len(self.urls):
                    log.warning(
                        "POST %s to %s failed (%s); trying %s", path, url, exc, self.server_url
                    )
        raise TransientError(f"POST {path}: " + "; ".join(failures))

    def _post(self, url: str, path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        try:
            response = self._http.post(url + path, content=body, headers=headers)
        except httpx.HTTPError as exc:  # connect, read, timeout, protocol errors
            refused = self._refused_certificate(url) if self.cert_file is not None else None
            if refused is not None:
                raise AuthError(f"POST {path}: {url} {refused}") from None
            raise _Unavailable(f"{type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status >= 500:
            raise _Unavailable(f"server answered {status}")
        if status == 429:
            # The control plane asks this node to slow down, whichever process says so.
            raise TransientError(f"POST {path}: {url} answered 429")
        try:
            answer = response.json()
        except ValueError:
            answer = response.text[:500]
        if status in (401, 403):
            # The server's reason ("token expired") is safe to show; it never echoes secrets.
            reason = answer.get("errors", answer) if isinstance(answer, dict) else answer
            raise AuthError(f"POST {path}: server answered {status}: {reason}")
        if status >= 400:
            errors = answer.get("errors", answer) if isinstance(answer, dict) else answer
            raise RejectedError(status, errors)
        if not isinstance(answer, dict):
            raise TransientError(f"POST {path}: answer is not a JSON object")
        return answer

    def join(self, node: str, token: str, credential_file: Path) -> str:
        answer = self.post(JOIN, Join(schema=SCHEMA, node=node, token=token), auth=False)
        credential = answer.get("credential")
        if answer.get("node") != node or not isinstance(credential, str):
            raise RejectedError(200, f"join answer is for node {answer.get('node')!r}")
        write_credential(credential_file, credential)
        self.credential = credential
        return credential

    def _refused_certificate(self, url: str) -> str | None:
        """Why the control plane dropped a connection that offered this node's
        certificate, when that is what happened; None when it is simply unreachable.

        A server on asyncio (uvicorn) ends a handshake whose client certificate
        fails verification without sending TLS's alert, so the agent sees only a
        closed connection and works the reason out itself: its certificate's dates,
        then whether the server answers a connection that offers none."""
        assert self.cert_file is not None
        try:
            held = certificate.read(self.cert_file)
        except certificate.CertificateError as exc:
            return f"refused the connection, and {exc}"
        now, when = datetime.now(UTC), "%Y-%m-%d %H:%M:%S UTC"
        if now >= held.not_after:
            return (
                f"refused certificate #{held.serial}: it expired at "
                f"{held.not_after.strftime(when)}; on the control plane, "
                f"`llmgw node add {held.node} --cert` issues a new one"
            )
        if now < held.not_before:
            return (
                f"refused certificate #{held.serial}: it is not valid before "
                f"{held.not_before.strftime(when)} (is this node's clock right?)"
            )
        try:
            httpx.get(url + "/", verify=str(self.ca_file) if self.ca_file else True, timeout=5)
        except httpx.HTTPError:
            return None
        return (
            f"refused certificate #{held.serial} of {held.node} (issued by {held.issuer}) at "
            "the TLS handshake, though it answers without one: the certificate is not "
            "signed by the control plane's CA"
        )

    def _renew_if_due(self) -> None:
        now = time.time()
        if now < self._renew_check or self.cert_file is None:
            return
        # Not again for a minute, whatever happens below: a renewal that fails is
        # retried on a later request, never in a loop in front of a heartbeat.
        self._renew_check = now + 60
        try:
            held = certificate.read(self.cert_file)
        except certificate.CertificateError as exc:
            log.error("cannot renew: %s", exc)
            return
        if now < held.renew_at.timestamp():
            self._renew_check = held.renew_at.timestamp()
            return
        if now >= held.not_after.timestamp():
            log.error(
                "certificate #%s expired at %s: it cannot renew itself; on the control plane, "
                "`llmgw node add %s --cert` issues a new one",
                held.serial, held.not_after, held.node,
            )  # fmt: skip
            return
        try:
            self.renew(held.node)
        except (TransientError, AuthError, RejectedError, certificate.CertificateError) as exc:
            log.warning(
                "renewing certificate #%s (valid until %s) failed: %s; trying again in a minute",
                held.serial, held.not_after, exc,
            )  # fmt: skip

    def renew(self, node: str) -> certificate.Held:
        """A new key and certificate, asked for with the certificate held now."""
        if self.cert_file is None or self.key_file is None:
            raise AuthError("no certificate to renew: cert_file and key_file are not set")
        key, csr = certificate.request(node)
        answer = self.post(RENEW, CertificateRequest(schema=SCHEMA, node=node, csr=csr))
        pem = answer.get("certificate")
        if answer.get("node") != node or not isinstance(pem, str):
            raise RejectedError(200, f"certificate answer is for node {answer.get('node')!r}")
        held = certificate.store(key, pem, self.key_file, self.cert_file, node)
        self._reload_if_replaced()
        log.info("renewed the certificate: #%s, valid until %s", held.serial, held.not_after)
        return held

    def register(self, payload: msgspec.Struct | Mapping[str, Any]) -> dict[str, Any]:
        return self.post(REGISTER, payload)

    def heartbeat(self, payload: msgspec.Struct | Mapping[str, Any]) -> dict[str, Any]:
        return self.post(HEARTBEAT, payload)


def send_latest(
    send: Callable[[Any], dict[str, Any]],
    build: Callable[[], Any],
    *,
    backoff: Backoff,
    stop: threading.Event,
    auth_retry_s: float = 60.0,
    on_auth_error: Callable[[], None] | None = None,
    max_attempts: int | None = None,
    what: str = "request",
) -> dict[str, Any] | None:
    """Send until it is accepted, building the payload afresh for every attempt.

    After an outage the server gets the node's state as it is now, not a queue of what
    it was: a stale heartbeat replayed late would be read as current. Returns the answer,
    or None when stopped, refused, or out of attempts; never raises for the network.
    """
    attempts = 0
    while not stop.is_set():
        attempts += 1
        last = max_attempts is not None and attempts >= max_attempts
        try:
            answer = send(build())
        except TransientError as exc:
            delay = backoff.next()
            then = "giving up" if last else f"retrying in {delay:.1f} s"
            log.warning("%s failed (%s); %s", what, exc, then)
        except AuthError as exc:
            # Slow and steady: nothing changes until an operator acts, and hammering the
            # server with a revoked credential only fills its log.
            delay = auth_retry_s
            then = "giving up" if last else f"retrying every {delay:.0f} s"
            log.error(
                "%s: credential refused (%s): revoked, or the node was removed; %s",
                what,
                exc,
                then,
            )
            if on_auth_error is not None:
                on_auth_error()
        except RejectedError as exc:
            log.error("%s %s", what, exc)
            return None
        else:
            backoff.reset()
            return answer
        if last:
            return None
        stop.wait(delay)
    return None
