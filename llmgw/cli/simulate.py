"""`llmgw simulate`: simulated agents, posting through the same agent API
as a real one.

It runs beside the control plane because it gives itself identities the
way an operator would (`llmgw node add`), then joins like a real agent.
Credentials are kept under LLMGW_DATA_DIR/simulator so a restart reuses
them. A name already taken by a real node is left alone.

Each simulated node also opens the agent's command stream, with the agent's
own client, and answers `ibnetdiscover` with its fabric's map
(llmgw.simulator.fabrics), so the control plane maps simulated fabrics the
way it maps real ones, and the fabric test's requests with simulated
numbers, marked so (llmgw.simulator.perftest). Cables change live through
`llmgw simulate-event`, which writes LLMGW_DATA_DIR/simulator/cables.json;
it is read every beat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from llmgw_agent.client import AgentClient, AuthError, Backoff, read_credential, send_latest
from llmgw_agent.collectors.registry import Roots
from llmgw_agent.stream import Handler, Stream

from llmgw.inventory import services
from llmgw.inventory.models import Node
from llmgw.simulator import fabrics, perftest
from llmgw.simulator.fleet import SimNode, make_fleet

log = logging.getLogger("llmgw.simulate")


def _credential_file(name: str) -> Path:
    return Path(settings.DATA_DIR) / "simulator" / f"{name}.credential"


def ensure_joined(client: AgentClient, sim: SimNode) -> str | None:
    path = _credential_file(sim.name)
    existing = Node.objects.filter(name=sim.name).first()
    if existing is not None and existing.registered_at and not existing.simulated:
        log.error("%s is a real node; the simulator leaves it alone", sim.name)
        return None
    credential = read_credential(path)
    if credential and existing is not None and services.authenticate(credential):
        return credential
    if existing is not None and existing.credential_hash:
        services.revoke_node(sim.name, "simulator")
    token = services.add_node(sim.name, "simulator")
    return client.join(sim.name, token, path)


def handlers(sim: SimNode) -> dict[str, Handler]:
    """What a simulated node's stream answers (its registration's features)."""

    def ping(roots: Roots, args: Mapping[str, Any]) -> str:
        return "pong"

    def ibnetdiscover(roots: Roots, args: Mapping[str, Any]) -> str:
        if sim.ib is None:
            raise RuntimeError("ibnetdiscover: no InfiniBand adapter on this node")
        if args.get("ports"):
            raise RuntimeError("the simulator prints the topology format only")
        return sim.ib.discover(sim.name, str(args.get("device") or "mlx5_0"))

    out = {"ping": ping}
    if sim.ib is not None:
        out["ibnetdiscover"] = ibnetdiscover
        out.update(perftest.handlers(sim))
    return out


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
    server: str, count: int, interval: float, prefix: str, once: bool, nvl72_trays: int = 0
) -> int:
    fleet = make_fleet(count, prefix, nvl72_trays=nvl72_trays)
    stop = threading.Event()
    clients: dict[str, AgentClient] = {}
    # Several web processes, comma-separated, as a real agent's server_urls.
    urls = [url for url in server.split(",") if url]
    for sim in fleet:
        client = AgentClient(urls)
        credential = ensure_joined(client, sim)
        if credential is None:
            continue
        client.credential = credential
        clients[sim.name] = client
    log.info("simulating %d nodes against %s every %.0f s", len(clients), server, interval)
    if not once:
        for sim in fleet:
            if sim.name in clients:
                client = clients[sim.name]
                stream = Stream(
                    # The stream follows its heartbeats to whichever URL answers.
                    lambda c=client: c.server_url,
                    lambda c=client: c.credential,
                    Roots(),
                    stop,
                    commands=handlers(sim),
                )
                threading.Thread(
                    target=stream.run_forever, name=f"stream-{sim.name}", daemon=True
                ).start()
    cables = Cables(fleet)
    registered: set[str] = set()
    backoff = Backoff()
    while not stop.is_set():
        started = time.monotonic()
        cables.poll()
        for sim in fleet:
            client = clients.get(sim.name)
            if client is None:
                continue
            try:
                if sim.name not in registered:
                    client.register(sim.registration(interval))
                    registered.add(sim.name)
                answer = send_latest(
                    client.heartbeat,
                    sim.heartbeat,
                    backoff=backoff,
                    stop=stop,
                    max_attempts=1,
                    what=f"{sim.name} heartbeat",
                )
                if answer and "desired" in answer:
                    sim.desired = answer["desired"]
                if answer and answer.get("register"):
                    registered.discard(sim.name)
            except AuthError as exc:
                log.error("%s: %s", sim.name, exc)
            except Exception as exc:  # a simulator keeps going, like an agent
                log.warning("%s: %s", sim.name, exc)
        if once:
            return 0
        stop.wait(max(0.0, interval - (time.monotonic() - started)))
    return 0
