"""The swarm says what held its nodes up: its own loop running late, or
heartbeats no web process answered and the nodes left without an answer.
A bench run's NotReady marks are put down to one side or the other by it,
so it must say nothing while all is well, and each cause when it comes."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest
from aiohttp import web

from llmgw.simulator import swarm
from llmgw.simulator.fleet import make_fleet
from tests.simulator.local_server import serving

# A web server of its own, on a local port.
pytestmark = pytest.mark.server


async def _run(hold_at_s: float, hold_s: float, stop_at_s: float, seconds: float) -> None:
    """Three nodes beating every 0.5 s for `seconds`; the loop blocked for
    `hold_s` at `hold_at_s`, and the server answering 503 from `stop_at_s`."""
    answering = True

    async def answer(request: web.Request) -> web.Response:
        if not answering:
            return web.json_response({"detail": "down"}, status=503)
        return web.json_response({"ok": True})

    members = [swarm.Member(sim, "node-credential") for sim in make_fleet(3, "w", nvl72_trays=0)]

    async def events() -> None:
        nonlocal answering
        await asyncio.sleep(hold_at_s)
        time.sleep(hold_s)  # the loop held, as a starved process holds it
        await asyncio.sleep(stop_at_s - hold_at_s - hold_s)
        answering = False

    async with (
        serving({swarm.REGISTER: answer, swarm.HEARTBEAT: answer}) as url,
        swarm.Swarm([url], members, 0.5, streams=False) as fleet,
    ):
        happening = asyncio.create_task(events())
        await fleet.run(seconds=seconds)
        await happening


def test_the_watch_names_a_late_loop_and_unanswered_nodes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(swarm, "WATCH_S", 2.0)
    caplog.set_level(logging.WARNING, logger="llmgw.simulate")
    # Windows of 2 s: quiet; the loop held from 2.3 s to 4.3 s (its watch,
    # due at 3 s, runs 1.3 s late); the server gone from 4.5 s.
    asyncio.run(_run(hold_at_s=2.3, hold_s=2.0, stop_at_s=4.5, seconds=6.8))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("simulator:")]
    assert len(lines) >= 2, lines
    late = re.match(r"simulator: its loop ran up to ([\d.]+) s late; 0 heartbeats", lines[0])
    assert late and float(late[1]) > swarm.LAG_S, lines
    down = re.search(r"; ([1-9]\d*) heartbeats unanswered; 3 nodes with no answer for over 1 s "
                     r"\(the longest [12] s\)$", lines[-1])  # fmt: skip
    assert down, lines
