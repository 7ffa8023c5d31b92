"""What a simulated node answers to the fabric test (`llmgw ctl fabric-test`).

There is no adapter to measure, so the numbers are made up from the
simulated link's rate (after any live cable change) and marked simulated in
every answer: the control plane and `llmgw ctl` say so beside the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from llmgw_agent.collectors.registry import Roots
from llmgw_agent.protocol import perftest as wire
from llmgw_agent.stream import Handler

if TYPE_CHECKING:
    from llmgw.simulator.fleet import SimNode

# ib_write_bw on a healthy NDR/HDR link reaches about this share of the signalling rate.
EFFICIENCY = (0.94, 0.98)
# (fabric, TCP port) -> the serving end's link rate: the simulated streams share one
# process, so the client's number can be held to the slower end, as a real run is.
_SERVING: dict[tuple[str, int], float] = {}


def _link(sim: SimNode, device: str) -> float:
    if sim.ib is None:
        raise RuntimeError("no InfiniBand adapter on this simulated node")
    index = device.removeprefix("mlx5_")
    if not index.isdigit() or int(index) >= sim.shape.adapters:
        raise RuntimeError(f"simulated: no RDMA device {device}")
    if sim.ib.is_down(sim.name, device):
        raise RuntimeError(f"simulated: {device} port 1 is down; the client cannot connect")
    return sim.ib.link(sim.name, device)[1]


def handlers(sim: SimNode) -> dict[str, Handler]:
    def server_start(roots: Roots, given: Mapping[str, Any]) -> str:
        args = msgspec.convert(dict(given), wire.ServerArgs)
        assert sim.ib is not None
        _SERVING[(sim.ib.name, args.tcp_port)] = _link(sim, args.device)
        started = wire.ServerStarted(
            device=args.device, port=args.port, tcp_port=args.tcp_port, simulated=True
        )
        return wire.encode(started)

    def server_stop(roots: Roots, given: Mapping[str, Any]) -> str:
        args = msgspec.convert(dict(given), wire.StopArgs)
        if sim.ib is not None:
            _SERVING.pop((sim.ib.name, args.tcp_port), None)
        return wire.encode(
            wire.ServerStopped(tcp_port=args.tcp_port, finished=True, simulated=True)
        )

    def client(roots: Roots, given: Mapping[str, Any]) -> str:
        args = msgspec.convert(dict(given), wire.ClientArgs)
        own = _link(sim, args.device)
        assert sim.ib is not None
        peer = _SERVING.get((sim.ib.name, args.tcp_port))
        if peer is None:
            raise RuntimeError(f"simulated: Couldn't connect to {args.server}:{args.tcp_port}")
        gbps = min(own, peer) * sim.rng.uniform(*EFFICIENCY)
        reading = wire.Reading(
            bytes=args.size, bw_average_gbps=round(gbps, 2), bw_peak_gbps=None, unit="Gb/sec"
        )
        done = wire.ClientDone(device=args.device, port=args.port, reading=reading, simulated=True)
        return wire.encode(done)

    return {wire.SERVER_START: server_start, wire.SERVER_STOP: server_stop, wire.CLIENT: client}
