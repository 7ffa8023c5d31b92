"""GPU, NVLink, IMEX and host-sensor metrics.

Per-heartbeat samples older than MEASUREMENT_MAX_AGE_S are left out. Wear
(row remaps, XIDs, PCIe replays, NVLink errors, fabric) is a state, read
once a minute: a card's last known wear is published for as long as its
node keeps reporting it, however long a fault lasts, so wear alerts stay
firing. A card whose wear has not been reported for 2 x
MEASUREMENT_MAX_AGE_S (one missed reading forgiven) has its wear series left
out like any stale reading, but never silently: llmgw_gpu_wear_age_seconds
and llmgw_gpu_wear_stale go on saying how old its last reading is, and the
GpuWearStale alert fires on them. A field the agent did not send is absent,
never zero.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from llmgw.inventory.cards import NODE_FIELDS, CardView, card_views
from llmgw.inventory.gpu_health import hardware_xids
from llmgw.inventory.models import Node
from llmgw.metrics.text import Family

THROTTLE_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)
GPU = ["node", "gpu", "class"]


def _fresh(at: datetime | None, now: datetime, seconds: float) -> bool:
    return at is not None and now - at <= timedelta(seconds=seconds)


def _g(name: str, doc: str, labels: list[str]) -> Family:
    return Family(name, doc, labels)


def _families() -> dict[str, Family]:
    return {
        "info": _g(
            "llmgw_gpu_info",
            "A GPU the node registered",
            ["node", "gpu", "class", "uuid", "name"],
        ),
        "healthy": _g(
            "llmgw_gpu_healthy", "1 if the card is free to place on as far as health goes", GPU
        ),
        "missing": _g(
            "llmgw_gpu_missing",
            "1 if a registered card is no longer seen by the driver",
            ["node", "gpu"],
        ),
        "mem_total": _g("llmgw_gpu_memory_total_bytes", "GPU memory", GPU),
        "util": _g("llmgw_gpu_utilization_percent", "GPU utilisation", GPU),
        "mem_used": _g("llmgw_gpu_memory_used_bytes", "GPU memory in use", GPU),
        "bw": _g("llmgw_gpu_memory_bandwidth_percent", "Memory bandwidth in use", GPU),
        "sm": _g("llmgw_gpu_sm_clock_mhz", "SM clock", GPU),
        "temp": _g("llmgw_gpu_temperature_celsius", "GPU and HBM temperature", [*GPU, "sensor"]),
        "power": _g("llmgw_gpu_power_watts", "Power draw", GPU),
        "limit": _g("llmgw_gpu_power_limit_watts", "Enforced power limit", GPU),
        "throttle": _g(
            "llmgw_gpu_throttle",
            "1 while a clock event (throttle) reason is active",
            [*GPU, "reason"],
        ),
        "ecc": _g("llmgw_gpu_ecc_uncorrected_total", "Uncorrected ECC errors (volatile)", GPU),
        "xid": _g("llmgw_gpu_xid_total", "XIDs seen, by code and kind", [*GPU, "xid", "kind"]),
        "rows": _g("llmgw_gpu_remapped_rows", "Remapped rows by state", [*GPU, "state"]),
        "replay": _g("llmgw_gpu_pcie_replay_total", "PCIe replays", GPU),
        "nvlink": _g("llmgw_gpu_nvlink_errors_total", "NVLink errors", [*GPU, "link", "counter"]),
        "wear_age": _g(
            "llmgw_gpu_wear_age_seconds",
            "Seconds since the node last reported the card's wear",
            GPU,
        ),
        "wear_stale": _g(
            "llmgw_gpu_wear_stale",
            "1 if the card's wear is too old to publish (its wear series are left out)",
            GPU,
        ),
        "joined": _g(
            "llmgw_gpu_nvlink_joined",
            "1 if the card joined its multi-node NVLink domain",
            [*GPU, "domain"],
        ),
        "imex": _g("llmgw_imex_up", "1 if nvidia-imex is up on the node", ["node"]),
        "cpu_temp": _g(
            "llmgw_node_cpu_temperature_celsius", "CPU package temperature", ["node", "package"]
        ),
        "cpu_power": _g(
            "llmgw_node_cpu_power_watts", "CPU package power (RAPL)", ["node", "package"]
        ),
        "inlet": _g("llmgw_node_inlet_temperature_celsius", "Board inlet temperature", ["node"]),
    }


def families(scope: QuerySet[Node], now: datetime) -> list[Family]:
    """The cards and host sensors of the nodes in `scope`."""
    return _Cards.collect(scope, now)


class _Cards:
    @classmethod
    def collect(cls, scope: QuerySet[Node], now: datetime) -> list[Family]:
        m = _families()
        nodes = list(
            scope.only(*NODE_FIELDS, "gpu_telemetry", "sensors", "telemetry_at", "imex").iterator(
                chunk_size=2000
            )
        )
        samples: dict[tuple[str, int], dict[str, Any]] = {}
        for n in nodes:
            if _fresh(n.telemetry_at, now, settings.MEASUREMENT_MAX_AGE_S):
                for s in n.gpu_telemetry or []:
                    samples[(n.name, s["index"])] = s
                cls._sensors(m, n)
            if n.imex is not None:
                m["imex"].add_metric([n.name], 1.0 if n.imex.get("up") else 0.0)
        for cards in card_views(nodes).values():
            for card in cards:
                cls._card(m, card, samples.get((card.node, card.index)), now)
        return list(m.values())

    @classmethod
    def _card(
        cls, m: dict[str, Family], card: CardView, sample: dict[str, Any] | None, now: datetime
    ) -> None:
        labels = [card.node, str(card.index), card.gpu_class]
        m["info"].add_metric([*labels, card.uuid, card.name], 1.0)
        m["healthy"].add_metric(labels, 1.0 if card.healthy else 0.0)
        m["missing"].add_metric(labels[:2], 1.0 if card.missing else 0.0)
        if card.memory_total_bytes is not None:
            m["mem_total"].add_metric(labels, card.memory_total_bytes)
        if card.ecc_uncorrected is not None:
            m["ecc"].add_metric(labels, card.ecc_uncorrected)
        cls._sample(m, labels, sample)
        stale, age = card.wear_stale(now), card.wear_age_s(now)
        if stale is None or age is None:  # never reported: unknown, not stale
            return
        m["wear_age"].add_metric(labels, age)
        m["wear_stale"].add_metric(labels, 1.0 if stale else 0.0)
        if not stale:
            cls._wear(m, labels, card)

    @staticmethod
    def _sample(m: dict[str, Family], labels: list[str], s: dict[str, Any] | None) -> None:
        if not s:
            return
        for key, metric in (
            ("utilization_percent", "util"),
            ("memory_used_bytes", "mem_used"),
            ("memory_bandwidth_percent", "bw"),
            ("sm_clock_mhz", "sm"),
            ("power_draw_w", "power"),
            ("power_limit_w", "limit"),
        ):
            if s.get(key) is not None:
                m[metric].add_metric(labels, s[key])
        for key, sensor in (("temperature_c", "gpu"), ("memory_temperature_c", "hbm")):
            if s.get(key) is not None:
                m["temp"].add_metric([*labels, sensor], s[key])
        if s.get("clock_event_reasons") is not None:
            active = set(s["clock_event_reasons"])
            for reason in THROTTLE_REASONS:
                m["throttle"].add_metric([*labels, reason], 1.0 if reason in active else 0.0)

    @staticmethod
    def _wear(m: dict[str, Family], labels: list[str], card: CardView) -> None:
        hardware = hardware_xids(card.xids)
        for code, count in (card.xids or {}).items():
            # isdecimal, not isdigit: "²".isdigit() is True and int("²") raises.
            kind = "hardware" if code.isdecimal() and int(code) in hardware else "other"
            m["xid"].add_metric([*labels, code, kind], count)
        for state, value in (card.remapped_rows or {}).items():
            if value is not None:
                m["rows"].add_metric([*labels, state], float(value))
        if card.pcie_replays is not None:
            m["replay"].add_metric(labels, card.pcie_replays)
        for link in card.nvlink_errors or []:
            for counter in ("replay", "recovery", "crc_flit", "crc_data"):
                if link.get(counter) is not None:
                    m["nvlink"].add_metric([*labels, str(link["link"]), counter], link[counter])
        if card.nvlink_domain is not None:
            m["joined"].add_metric(
                [*labels, card.nvlink_domain], 1.0 if card.nvlink_joined else 0.0
            )

    @staticmethod
    def _sensors(m: dict[str, Family], n: Node) -> None:
        sensors = n.sensors or {}
        for package in sensors.get("cpu_packages") or []:
            p = str(package["package"])
            if package.get("temperature_c") is not None:
                m["cpu_temp"].add_metric([n.name, p], package["temperature_c"])
            if package.get("power_w") is not None:
                m["cpu_power"].add_metric([n.name, p], package["power_w"])
        if sensors.get("inlet_temperature_c") is not None:
            m["inlet"].add_metric([n.name], sensors["inlet_temperature_c"])
