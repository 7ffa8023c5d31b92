"""API load against both web processes, as a client behind a load balancer
sees it: a request that cannot reach one web process is sent to the other
(a connection refused is what a balancer's health check reads), and only an
answer that is not 200, or no answer from either, is an error.

A GET whose connection the web process closed (or reset) before answering
is sent to the other one too, as nginx (`proxy_next_upstream error`) and
HAProxy (`retry-on empty-response conn-failure`) send an idempotent
request again. A web process
stopping cleanly closes its idle keep-alive connections, and a request can
cross that close on the wire; a completion (a POST) is never sent twice."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from tests.reliability.figures import percentile

PATH = "/api/v1/nodes/"
# What the gateway load asks of the real agent's model: the smallest answer.
COMPLETION = {"model": "tiny", "prompt": "the", "max_tokens": 2}
# A request its web process died under: a balancer answers it 502.
CUT = -1


@dataclass
class Sample:
    at: float  # seconds since the load started
    status: int  # 0: no web process answered; CUT: its web process died under it
    latency_s: float


@dataclass
class Load:
    urls: list[str]
    token: str
    workers: int = 2
    # True: completions through the gateway, `token` being an API key.
    gateway: bool = False
    samples: list[Sample] = field(default_factory=list)
    failovers: int = 0
    retried: int = 0  # GETs sent again after a close without an answer
    cuts: Counter[str] = field(default_factory=Counter)  # what each CUT was
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        self.started = time.monotonic()
        for i in range(self.workers):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _run(self, i: int) -> None:
        scheme = "Bearer" if self.gateway else "Token"
        headers = {"Authorization": f"{scheme} {self.token}"}
        with httpx.Client(headers=headers, timeout=30) as http:
            n = i
            while not self._stop.is_set():
                n += 1
                sent = time.monotonic()
                status = self.one(http, n)
                self.samples.append(Sample(sent - self.started, status, time.monotonic() - sent))
                time.sleep(0.05)

    def one(self, http: httpx.Client, n: int) -> int:
        for k in range(len(self.urls)):
            url = self.urls[(n + k) % len(self.urls)]
            try:
                if self.gateway:
                    return http.post(url + "/v1/completions", json=COMPLETION).status_code
                return http.get(url + PATH).status_code
            except httpx.ConnectError:
                self.failovers += 1
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                # The connection closed (or reset: a close that crossed data
                # on the wire) before an answer: sent again to the other, as
                # a balancer sends an idempotent request again on an error.
                if self.gateway:
                    return self._cut(exc)
                self.retried += 1
            except httpx.HTTPError as exc:
                return self._cut(exc)
        return 0

    def _cut(self, exc: httpx.HTTPError) -> int:
        self.cuts[f"{type(exc).__name__}: {exc}"] += 1
        return CUT

    def cut(self) -> int:
        return sum(1 for s in self.samples if s.status == CUT)

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at < end]

    def errors(self, samples: list[Sample] | None = None) -> Counter[int]:
        return Counter(
            s.status for s in (self.samples if samples is None else samples) if s.status != 200
        )

    def latencies(self, samples: list[Sample] | None = None) -> tuple[float, float]:
        values = [s.latency_s for s in (self.samples if samples is None else samples)]
        return percentile(values, 50), percentile(values, 99)


@dataclass
class Answer:
    status: int  # 0: no answer (refused, cut, or past the client's 120 s)
    latency_s: float
    retry_after: str


def burst(urls: list[str], token: str, count: int) -> tuple[list[Answer], float]:
    """`count` API calls at once, spread over the web processes: each one's
    answer, and the wall time."""

    async def main() -> tuple[list[Answer], float]:
        limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
        headers = {"Authorization": f"Token {token}"}
        async with httpx.AsyncClient(limits=limits, headers=headers, timeout=120) as http:

            async def call(i: int) -> Answer:
                sent = time.monotonic()
                try:
                    r = await http.get(urls[i % len(urls)] + PATH)
                except httpx.HTTPError:
                    return Answer(0, time.monotonic() - sent, "")
                return Answer(
                    r.status_code, time.monotonic() - sent, r.headers.get("Retry-After", "")
                )

            started = time.monotonic()
            done = await asyncio.gather(*(call(i) for i in range(count)))
            wall = time.monotonic() - started
        return list(done), wall

    return asyncio.run(main())
