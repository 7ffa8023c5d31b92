"""`llmgw simulate`: simulated agents, posting through the same agent API
as a real one.

It runs beside the control plane because it gives itself identities the
way an operator would (`llmgw node add`), then joins like a real agent.
Credentials are kept under LLMGW_DATA_DIR/simulator so a restart reuses
them. A name already taken by a real node is left alone.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from django.conf import settings
from llmgw_agent.client import AgentClient, AuthError, Backoff, read_credential, send_latest

from llmgw.inventory import services
from llmgw.inventory.models import Node
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


def run(
    server: str, count: int, interval: float, prefix: str, once: bool, nvl72_trays: int = 0
) -> int:
    fleet = make_fleet(count, prefix, nvl72_trays=nvl72_trays)
    stop = threading.Event()
    clients: dict[str, AgentClient] = {}
    for sim in fleet:
        client = AgentClient(server)
        credential = ensure_joined(client, sim)
        if credential is None:
            continue
        client.credential = credential
        clients[sim.name] = client
    log.info("simulating %d nodes against %s every %.0f s", len(clients), server, interval)
    registered: set[str] = set()
    backoff = Backoff()
    while not stop.is_set():
        started = time.monotonic()
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
