"""Synthetic GPU readings for simulated nodes, shaped like what the agent's
NVML collectors send (docs/agent-protocol.md). GB200 trays of an NVL72-style
domain share one ClusterUUID and clique; a tray can be held out the way
real ones are (a card whose fabric registration ran out of resources, the
status seen in the real GB200 capture, or IMEX down)."""

from __future__ import annotations

import random
from typing import Any

NVL72_CLUSTER = "7f3c2a10-5b8e-4d21-9c6f-2e8a1b4d9c01"
NVL72_CLIQUE = 32766
NO_CLUSTER = "00000000-0000-0000-0000-000000000000"


def fabric(kind: str, held_out: bool, card: int) -> dict[str, Any]:
    if kind != "gb200":
        # One machine's NVSwitch: a cluster of zeros, no multi-node domain.
        return {
            "state": "completed",
            "status": "success",
            "cluster_uuid": NO_CLUSTER,
            "multi_node": False,
            "clique_id": 0,
        }
    if held_out and card == 2:
        return {
            "state": "completed",
            "status": "insufficient_resources",
            "cluster_uuid": NVL72_CLUSTER,
            "multi_node": True,
            "clique_id": NVL72_CLIQUE,
            "health": "unhealthy",
        }
    return {
        "state": "completed",
        "status": "success",
        "cluster_uuid": NVL72_CLUSTER,
        "multi_node": True,
        "clique_id": NVL72_CLIQUE,
        "bandwidth": "full",
        "health": "healthy",
    }


def topology(uuids: list[str], links: int) -> dict[str, Any]:
    n = len(uuids)
    return {
        "gpus": uuids,
        "matrix": [["X" if a == b else f"NV{links}" for b in range(n)] for a in range(n)],
    }


def imex(kind: str, trays: list[str], up: bool) -> dict[str, Any] | None:
    if kind != "gb200":
        return None
    return {
        "up": up,
        "domain_state": "up" if up else "down",
        "channels": 1 if up else 0,
        "nodes": [
            {"index": i, "address": f"10.72.0.{i + 1}", "status": "ready"}
            for i, _ in enumerate(trays)
        ],
    }


class GpuSim:
    def __init__(self, kind: str, count: int, rng: random.Random, held_out: bool = False) -> None:
        self.kind, self.count, self.rng, self.held_out = kind, count, rng, held_out
        # Set when a tray changes live: the next beat carries the minute's
        # readings at once, so the change shows within one heartbeat.
        self.force_wear = False
        self.util = [rng.uniform(0, 60) for _ in range(count)]
        self.replays = [rng.randint(0, 40) for _ in range(count)]
        self.beats = 0

    def sample(self, memory_total: int, power_limit: float) -> list[dict[str, Any]]:
        self.beats += 1
        out = []
        for i in range(self.count):
            self.util[i] = min(100.0, max(0.0, self.util[i] + self.rng.uniform(-8, 8)))
            u = self.util[i]
            card: dict[str, Any] = {
                "index": i,
                "utilization_percent": round(u, 1),
                "memory_used_bytes": int(memory_total * min(0.95, 0.05 + u / 120)),
                "memory_bandwidth_percent": round(u * 0.7, 1),
                "sm_clock_mhz": 1980 if u > 5 else 345,
                "ecc_uncorrected": 0,
                "temperature_c": round(32 + u * 0.45, 1),
                "memory_temperature_c": round(36 + u * 0.4, 1),
                "power_draw_w": round(power_limit * (0.12 + 0.8 * u / 100), 1),
                "power_limit_w": power_limit,
                "clock_event_reasons": ["gpu_idle"] if u < 5 else [],
            }
            if self.beats % 6 == 1 or self.force_wear:  # the minute's wear readings
                card.update(
                    remapped_rows={
                        "correctable": 0,
                        "uncorrectable": 0,
                        "pending": False,
                        "failed": False,
                    },
                    pcie_replays=self.replays[i],
                    nvlink_errors=[
                        {"link": k, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
                        for k in range(4)
                    ],
                    fabric=fabric(self.kind, self.held_out, i),
                    xids={},
                )
            out.append(card)
        self.force_wear = False
        return out
