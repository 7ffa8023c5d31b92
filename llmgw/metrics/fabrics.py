"""InfiniBand/RoCE port and fabric metrics. Port samples older than
MEASUREMENT_MAX_AGE_S are left out; a counter the agent did not send is
absent. Ports are a node's series (its shard of the scrape); each fabric's
subnet managers and problems are the fleet's."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet

from llmgw.fabrics import overview
from llmgw.fabrics.choices import Problem, link_up
from llmgw.inventory.models import Node
from llmgw.metrics.text import Family

PORT = ["node", "device", "port", "fabric"]


def port_families(scope: QuerySet[Node], now: datetime) -> list[Family]:
    active = Family(
        "llmgw_ib_port_active",
        "1 if the port can carry traffic (ACTIVE and LinkUp); state and "
        "phys_state tell an unplugged cable (DOWN/Polling) from a missing subnet manager (INIT/LinkUp)",
        [*PORT, "state", "phys_state"],
    )
    rate = Family("llmgw_ib_port_rate_gbps", "Port rate", PORT)
    counter = Family(
        "llmgw_ib_port_counter_total", "Port counters (data in bytes)", [*PORT, "counter"]
    )
    cutoff = now - timedelta(seconds=settings.MEASUREMENT_MAX_AGE_S)
    rows = scope.filter(ports_at__gte=cutoff).values_list("name", "port_samples")
    for name, samples in rows.iterator(chunk_size=2000):
        for p in samples or []:
            labels = [name, p["device"], str(p["port"]), p.get("fabric") or ""]
            up = link_up(p.get("state"), p.get("phys_state"))
            active.add_metric(
                [*labels, p.get("state") or "", p.get("phys_state") or ""], 1.0 if up else 0.0
            )
            if p.get("rate_gbps") is not None:
                rate.add_metric(labels, p["rate_gbps"])
            for key, value in (p.get("counters") or {}).items():
                counter.add_metric([*labels, key], value)
    return [active, rate, counter]


def fabric_families() -> list[Family]:
    master = Family(
        "llmgw_fabric_master_sm",
        "The master subnet manager of each fabric",
        ["fabric", "guid", "priority"],
    )
    managers = Family(
        "llmgw_fabric_subnet_managers", "Subnet managers seen on each fabric", ["fabric"]
    )
    problems = Family(
        "llmgw_fabric_problems", "1 while the fabric shows the problem", ["fabric", "problem"]
    )
    for f in overview.build()["fabrics"]:
        if f["kind"] != "infiniband":
            continue
        if f["master"]:
            master.add_metric(
                [f["identity"], f["master"]["guid"], str(f["master"]["priority"])], 1.0
            )
        managers.add_metric([f["identity"]], len(f["subnet_managers"]))
        codes = {p["code"] for p in f["problems"]}
        for code in Problem.values:
            problems.add_metric([f["identity"], code], 1.0 if code in codes else 0.0)
    return [master, managers, problems]
