"""The simulator gives up on a request as an agent does: after TIMEOUT_S
without a connection or without the answer's next bytes, and not for the
time it waited for one of the swarm's shared connections, which a real
agent does not share."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from llmgw.simulator import swarm
from llmgw.simulator.fleet import make_fleet
from tests.simulator.local_server import serving

PATH = "/api/agent/v1/heartbeat"
# A web server of its own, on a local port.
pytestmark = pytest.mark.server


async def _posts(answer_after_s: float, calls: int) -> list[str]:
    """`calls` heartbeats at once through a pool of one connection to a
    server that answers each after `answer_after_s`: what became of each."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(answer_after_s)
        return web.json_response({"ok": True})

    members = [
        swarm.Member(sim, "node-credential") for sim in make_fleet(calls, "t", nvl72_trays=0)
    ]
    async with (
        serving({PATH: slow}) as url,
        swarm.Swarm([url], members, 10.0, streams=False, connections=1) as fleet,
    ):

        async def one(member: swarm.Member) -> str:
            try:
                await fleet._post(member, PATH, b"{}")
                return "answered"
            except swarm.Unavailable as exc:
                return "TimeoutError" if "Timeout" in str(exc) else str(exc)

        return await asyncio.gather(*(one(m) for m in members))


def test_waiting_for_the_shared_pool_is_not_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # Three calls of 0.3 s through one connection: the last waits 0.6 s for
    # it, past a 0.5 s limit counted from the call.
    monkeypatch.setattr(swarm, "TIMEOUT_S", 0.5)
    assert asyncio.run(_posts(0.3, 3)) == ["answered"] * 3


def test_an_answer_that_does_not_come_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(swarm, "TIMEOUT_S", 0.5)
    assert asyncio.run(_posts(1.0, 1)) == ["TimeoutError"]
