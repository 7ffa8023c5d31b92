"""Facility domains' power: each domain's draw by source and its cap, as
`llmgw ctl facility` shows them, so a domain past its cap can alert.

A source nobody reported for any node of the domain is absent, never 0:
a domain with no readings is unknown, not idle.
"""

from __future__ import annotations

from llmgw.facility import services
from llmgw.metrics.text import Family

DOMAIN = ["domain", "level"]
# "largest" is each node's largest known figure, summed: the draw placement
# holds against the cap (llmgw.placement.power), so the alert reads it.
SOURCES = (("declared", "declared_w"), ("derived", "derived_w"), ("measured", "measured_w"),
           ("largest", "draw_w"))  # fmt: skip


def families() -> list[Family]:
    watts = Family(
        "llmgw_domain_power_watts",
        "A facility domain's draw by source (declared, derived, measured, largest)",
        [*DOMAIN, "source"],
    )
    cap = Family("llmgw_domain_power_cap_watts", "A facility domain's power cap", DOMAIN)
    unknown = Family(
        "llmgw_domain_power_unknown_nodes",
        "Nodes of the domain with no power figure, left out of its draw",
        DOMAIN,
    )
    for row in services.overview()["domains"]:
        labels = [row["domain"], row["level"]]
        for source, key in SOURCES:
            if row[key] is not None:
                watts.add_metric([*labels, source], row[key])
        if row["cap_w"] is not None:
            cap.add_metric(labels, row["cap_w"])
        unknown.add_metric(labels, row["unknown_nodes"])
    return [watts, cap, unknown]
