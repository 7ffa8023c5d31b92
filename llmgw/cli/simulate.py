"""`llmgw simulate`: simulated agents, posting through the same agent API
as a real one, thousands of them from one process (llmgw.simulator.swarm).

It runs beside the control plane because it gives itself identities the
way an operator would (`llmgw node add`), then joins like a real agent.
Credentials are kept under LLMGW_DATA_DIR/simulator so a restart reuses
them. A name already taken by a real node is left alone.

Each simulated node also opens the agent's command stream and answers
`ibnetdiscover` with its fabric's map (llmgw.simulator.fabrics), so the control plane maps simulated fabrics the
way it maps real ones, and the fabric test's requests with simulated
numbers, marked so (llmgw.simulator.perftest). Cables change live through
`llmgw simulate-event`, which writes LLMGW_DATA_DIR/simulator/cables.json;
it is read every beat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
from django.conf import settings
from django.db import DatabaseError, connection
from llmgw_agent.client import Backoff, read_credential, write_credential

from llmgw import gc_pauses
from llmgw.inventory import services
from llmgw.inventory.models import Node
from llmgw.simulator import fabrics
from llmgw.simulator.engine import Endpoint
from llmgw.simulator.fleet import SimNode, make_fleet
from llmgw.simulator.swarm import Member, Refused, Swarm
from llmgw.simulator.swarm import handlers as handlers  # what a node's stream answers
from llmgw.simulator.swarm import run as run_loop

log = logging.getLogger("llmgw.simulate")


def _credential_file(name: str) -> Path:
    return Path(settings.DATA_DIR) / "simulator" / f"{name}.credential"


def identity(sim: SimNode) -> tuple[str, str] | None:
    """("credential", it) when the node's stored credential still works,
    ("token", a join token) when it must join (again), None for a name a
    real node holds."""
    path = _credential_file(sim.name)
    existing = Node.objects.filter(name=sim.name).first()
    if existing is not None and existing.registered_at and not existing.simulated:
        log.error("%s is a real node; the simulator leaves it alone", sim.name)
        return None
    credential = read_credential(path)
    if credential and existing is not None and services.authenticate(credential):
        return "credential", credential
    if existing is not None and existing.credential_hash:
        services.revoke_node(sim.name, "simulator")
    return "token", services.add_node(sim.name, "simulator")


def _identities(fleet: list[SimNode]) -> list[tuple[str, str] | None]:
    try:
        names = [sim.name for sim in fleet]
        known = set(Node.objects.filter(name__in=names).values_list("name", flat=True))
        # Names the inventory has never seen are added all at once: one at a
        # time, 5,000 of them took minutes before the first could join.
        tokens = services.add_nodes([name for name in names if name not in known], "simulator")
        return [
            ("token", tokens[sim.name]) if sim.name in tokens else identity(sim) for sim in fleet
        ]
    finally:
        connection.close()  # this thread's own, which ends with it


def _identities_retried(fleet: list[SimNode], retry: bool) -> list[tuple[str, str] | None]:
    """_identities, tried again as an agent retries while the database
    does not answer: a fleet started while PostgreSQL was away (or too
    slow to hand out a connection) would otherwise exit and never come back."""
    backoff = Backoff()
    while True:
        try:
            return _identities(fleet)
        except DatabaseError as exc:
            if not retry:
                raise
            delay = backoff.next()
            log.warning("could not read the inventory (%s); retrying in %.1f s", exc, delay)
            time.sleep(delay)


async def join_fleet(swarm: Swarm, fleet: list[SimNode], retry: bool = True) -> list[Member]:
    """Each node's credential: kept from the last run, or joined for now,
    several joins at once. The database work runs in one thread of its own,
    off the event loop; `retry`: while the database cannot be read."""
    loop = asyncio.get_running_loop()
    members: list[Member] = []
    with ThreadPoolExecutor(1, thread_name_prefix="simulate-db") as db:
        identities = await loop.run_in_executor(db, _identities_retried, fleet, retry)
    joining = asyncio.Semaphore(16)

    async def member(sim: SimNode, kind: str, value: str) -> None:
        if kind == "token":
            async with joining:
                try:
                    value = await swarm.join(sim.name, value)
                except (Refused, aiohttp.ClientError, TimeoutError) as exc:
                    log.error("%s could not join: %s", sim.name, exc)
                    return
            write_credential(_credential_file(sim.name), value)
        members.append(Member(sim, value))

    found = zip(fleet, identities, strict=True)
    await asyncio.gather(*(member(sim, *what) for sim, what in found if what is not None))
    return members


class Cables:
    """The live cable changes of cables.json, applied to each fabric when the file changes."""

    def __init__(self, fleet: list[SimNode]) -> None:
        self.path = fabrics.cables_file(settings.DATA_DIR)
        self.fabrics = {id(n.ib): n.ib for n in fleet if n.ib is not None}
        self.trays = {n.name: (n, n.held_out) for n in fleet if n.shape.kind == "gb200"}
        self.seen: float | None = None

    def poll(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            mtime = 0.0
        if mtime == self.seen:
            return
        self.seen = mtime
        cables = fabrics.read_cables(self.path)
        for fab in self.fabrics.values():
            hosts = {h.name for h in fab.tree.hosts}
            # One assignment: a stream thread discovering meanwhile sees old or new, whole.
            fab.cables = {k: v for k, v in cables.items() if k[0] in hosts}
        if cables:
            log.info("simulated cables changed: %s", cables)
        trays = fabrics.read_trays(self.path)
        for name, (sim, initially) in self.trays.items():
            sim.set_tray(trays.get(name), initially)
        if trays:
            log.info("simulated trays changed: %s", trays)


def event(action: str, node: str, devices: list[str]) -> int:
    """`llmgw simulate-event`: change a simulated cable; the simulator reads it each beat."""
    if action.startswith("tray-"):
        if not node:
            raise SystemExit(f"simulate-event {action}: needs the tray's NODE")
    elif action != "reset" and (not node or not devices):
        raise SystemExit(f"simulate-event {action}: needs NODE and DEVICE (mlx5_N or all)")
    if devices == ["all"]:
        devices = [f"mlx5_{i}" for i in range(8)]
    path = fabrics.cables_file(settings.DATA_DIR)
    fabrics.write_event(path, action, node, devices)
    print(f"{action} {node} {' '.join(devices)}: written to {path}")
    return 0


def run(
    server: str,
    count: int,
    interval: float,
    prefix: str,
    once: bool,
    nvl72_trays: int = 0,
    serve: Endpoint | None = None,
    own_process: bool = False,
) -> int:
    """`serve`: the endpoint the nodes' shards are ready on and answered
    from (--serve-shards); without it they stay pending, costing nothing.
    `own_process`: the process is the simulator's (`llmgw simulate`), its
    collector the simulator's to settle; a test running it keeps its own."""
    fleet = make_fleet(count, prefix, nvl72_trays=nvl72_trays)
    if own_process:
        # Its collector's pauses hold every simulated node up. On CPython's
        # defaults 5,000 nodes spent 15-27% of the simulator's time in them,
        # and 56-68% while the control plane was away (every retry's error
        # is garbage): settled as a web process is (llmgw.gc_pauses), and
        # watched.
        gc_pauses.settle()
        gc_pauses.watch()
    # Several web processes, comma-separated, as a real agent's server_urls.
    urls = [url for url in server.split(",") if url]
    cables = Cables(fleet)

    async def main() -> None:
        swarm = Swarm(urls, [], interval, streams=not once, tick=cables.poll)
        if serve is not None:
            await serve.start()
            log.info("simulated shards are answered at %s", serve.url)
            for sim in fleet:
                sim.serving = serve.life(sim.name)
        async with swarm:
            swarm.members = await join_fleet(swarm, fleet, retry=not once)
            log.info(
                "simulating %d nodes against %s every %.0f s", len(swarm.members), server, interval
            )
            cables.poll()
            await swarm.run(once=once)
        if serve is not None:
            await serve.stop()

    run_loop(main())
    return 0
