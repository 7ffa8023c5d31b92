"""A heartbeat no web process answers leaves nothing for the collector
(swarm._forget). Through an outage 5,000 simulated nodes fail thousands of
requests a second, and each failure's traceback held frames that held the
futures that held the error: a third of the simulator's CPU went to the
collector freeing them."""

from __future__ import annotations

import gc

from llmgw.simulator import swarm
from llmgw.simulator.fleet import make_fleet
from tests.servers import free_port


async def _left_after(failures: int) -> int:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    [sim] = make_fleet(1, "t")
    member = swarm.Member(sim, "node-credential", registered=True)
    async with swarm.Swarm([url, url], [member], 10.0, streams=False) as fleet:
        # The first failures build what every later one reuses.
        for _ in range(3):
            assert not await fleet._beat(member)
        gc.collect()
        gc.disable()
        try:
            for _ in range(failures):
                assert not await fleet._beat(member)
            return gc.collect()
        finally:
            gc.enable()


def test_failed_heartbeats_leave_nothing_for_the_collector() -> None:
    # Each failed heartbeat (two web processes tried) left about 160 objects
    # in cycles before the tracebacks were dropped.
    assert swarm.run(_left_after(20)) < 20
