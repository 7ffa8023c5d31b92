"""The simulator's nodes do not wait for each other's connections: an
agent has its own, so however slowly the control plane answers, every
node's heartbeat is sent when it is due (llmgw.simulator.swarm). With the
pool capped at 256, 5,000 nodes answered in 0.6 s each could send fewer
than they were due to, and the backlog had nodes silent for 80 s."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from llmgw.simulator import swarm
from llmgw.simulator.fleet import make_fleet
from tests.simulator.local_server import serving

PATH = "/api/agent/v1/heartbeat"
# Past the cap the pool had: every one of them in flight at once.
NODES = 300
pytestmark = pytest.mark.server


def test_every_node_heartbeat_is_in_flight_at_once_however_slow_the_answer() -> None:
    in_flight = {"now": 0, "most": 0}

    async def slow(request: web.Request) -> web.Response:
        in_flight["now"] += 1
        in_flight["most"] = max(in_flight["most"], in_flight["now"])
        await asyncio.sleep(1.0)
        in_flight["now"] -= 1
        return web.json_response({"ok": True})

    members = [swarm.Member(sim, "cred") for sim in make_fleet(NODES, "p", nvl72_trays=0)]

    async def run() -> None:
        async with (
            serving({PATH: slow}) as url,
            swarm.Swarm([url], members, 10.0, streams=False) as fleet,
        ):
            await asyncio.gather(*(fleet._post(m, PATH, b"{}") for m in members))

    asyncio.run(run())
    # A capped pool never has more than its cap in flight.
    assert in_flight["most"] == NODES
